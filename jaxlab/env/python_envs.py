"""Python envs behind the VecEnv interface: Gymnasium vector envs and PettingZoo parallel envs.

    jaxlab.make("gymnasium:CartPole-v1", num_envs=64)      # gymnasium.make_vec(ID, 64, "sync", SAME_STEP)
    jaxlab.make("pettingzoo:pettingzoo.butterfly.pistonball_v6", num_envs=2, continuous=False)
                                                           # MODULE.parallel_env(**kwargs), once per env

The name is a prefix and what follows it: ``gymnasium:ID`` (any id gymnasium.make_vec takes, also
"module:Id" ids that import their module first; an id registered with only a vector_entry_point is
made with it, and must autoreset SAME_STEP) or ``pettingzoo:MODULE`` (an importable module with a
``parallel_env(**kwargs)`` factory of a PettingZoo ParallelEnv: one of PettingZoo's or your own).
Keyword arguments besides num_envs, seed, num_threads, library and mask_check go to the env's
constructor. Buffers, shapes and flags are those of jaxlab.env.vecenv (A = num_envs * agents_per_env):

    observations       [A, *obs_shape]  uint8 for a uint8 Box, else float32 (other dtypes are cast)
    actions            [A] int32 (Discrete), [A, k] int32 (MultiDiscrete), [A, k] float32 (Box, clipped
                       to its bounds before the env sees it, as the C envs clip)
    rewards            [A] float32
    terminals          [A] bool   the episode ended for good in this step
    truncations        [A] bool   a time limit cut it; never both: a step that Gymnasium reports as
                       terminated and truncated (TimeLimit on the step the pole falls) is a terminal
    final_observations [A, *obs_shape]  rows whose episode ended in this step: the last observation of
                       that episode (observations already holds the next one's first)
    action_mask        [A, sum(nvec)] bool (envs of Discrete or MultiDiscrete actions whose observations
                       are Dicts with "observation" and "action_mask", Gymnasium's or PettingZoo's, or
                       PettingZoo envs whose infos hold "action_mask"), else None
    active             [A] bool, PettingZoo envs with more than one agent per env, else None: 0 while an
                       agent whose episode ended waits for its env's reset, or one of possible_agents
                       not in env.agents waits for a step to add it (its rows: reward 0, terminal 1,
                       an all-True mask row; not to be learned from), as C option agents_wait

Rows are env-major: row e * agents_per_env + j is agent j of env e, j in the order of the env's
possible_agents. Every env resets within the step in which its episode ends: Gymnasium's vector env
is made with autoreset_mode SAME_STEP (the final observation comes in its info; NEXT_STEP vector envs
are refused), a PettingZoo env is reset when no agent is left in ``env.agents``.
Statistics are the adapter's own, per agent-episode: ``episode_return`` (sum of the agent's rewards)
and ``episode_length`` (steps it acted), in the info format of the C envs. What an env returns is
checked against what it declares and against the Gymnasium / ParallelEnv API (shapes, dtypes, the
agent lists, the old gym and PettingZoo APIs): ValueError or RuntimeError naming the env and the fix.

What the C envs have and these do not: env state in checkpoints (save_state raises EnvStateError:
jaxlab cannot copy a Python object's state), threads (num_threads is accepted and ignored: the envs
step one after the other in the calling thread), env parameters in config files (keyword arguments
to jaxlab.make only) and text rendering (render() returns None). They are slower: `jaxlab bench ID`.
"""

from __future__ import annotations

import functools
import importlib
import re
import threading
from dataclasses import dataclass, replace

import numpy as np

from jaxlab.env.spaces import Box, Discrete, EnvSpaces, MultiDiscrete
from jaxlab.env.buffers import aligned_empty, allocate
from jaxlab.env.vecenv import VecEnv
from jaxlab.messages import install_extra, short_repr

PREFIXES = ("gymnasium:", "pettingzoo:")
#: Built-in C envs that step exactly like a Python env (tests/test_env_dynamics.py checks it): their
#: config file (configs/envs/NAME.toml) gives the Python env's defaults, and `jaxlab bench` compares.
C_TWINS = {"gymnasium:CartPole-v1": "cartpole", "gymnasium:Pendulum-v1": "pendulum"}
LOG_NAMES = ("episode_return", "episode_length")


class EnvStateError(NotImplementedError):
    """A Python env's state cannot be saved or loaded."""


def is_python_env(name) -> bool:
    """Whether ``name`` names a Python env (``gymnasium:ID`` or ``pettingzoo:MODULE``)."""
    return isinstance(name, str) and name.startswith(PREFIXES)


@dataclass(frozen=True)
class PythonEnvType:
    """What jaxlab knows of a Python env without creating it; the ``kind`` of its VecEnv (the same
    fields as registry.EnvType that the trainer and config read: no parameters, two statistics)."""

    name: str
    description: str
    params: tuple = ()
    log_names: tuple[str, ...] = LOG_NAMES
    options: frozenset = frozenset()
    library: None = None

    def has(self, option: str) -> bool:
        """Whether the env has ``option`` (mask, agents_wait; never render or set_state)."""
        return option in self.options


def _split(name: str) -> tuple[str, str]:
    prefix, _, target = name.partition(":")
    if not target.strip():
        example = "gymnasium:CartPole-v1" if prefix == "gymnasium" else "pettingzoo:pettingzoo.butterfly.pistonball_v6"
        raise ValueError(f"env name {name!r} names no env after '{prefix}:'; write e.g. {example!r}")
    return prefix, target


def _import_package(package: str, name: str):
    try:
        return importlib.import_module(package)
    except ModuleNotFoundError as err:
        if err.name != package:
            raise
        raise ImportError(f"env {name!r} needs the {package} package, which is not installed; install it "
                          f"with {install_extra(package)}") from None


def _gymnasium(name: str):
    gym = _import_package("gymnasium", name)
    if not hasattr(gym.vector, "AutoresetMode"):
        raise ImportError(f"env {name!r} needs gymnasium >= 1.1 (its SAME_STEP autoreset mode), found "
                          f"{gym.__version__}; upgrade with {install_extra('gymnasium')}")
    return gym


def _parallel_env_factory(name: str, module_name: str):
    """MODULE.parallel_env, with errors that name the module and a fix; for a PettingZoo registry id
    (one with a "/", PettingZoo >= 1.27: "butterfly/pistonball-v6"), pettingzoo.make("parallel", id)."""
    if "/" in module_name:
        pettingzoo = _import_package("pettingzoo", name)
        if not hasattr(pettingzoo, "spec"):
            raise ImportError(f"env {name!r} is a PettingZoo registry id, which needs pettingzoo >= 1.27 (found "
                              f"{pettingzoo.__version__}); upgrade it, or name the env's module instead "
                              "(pettingzoo:pettingzoo.butterfly.pistonball_v6)")
        try:
            pettingzoo.spec("parallel", module_name)
        except Exception as err:  # noqa: BLE001 (pettingzoo's registry errors, its list of ids included)
            raise ValueError(f"unknown PettingZoo parallel env {module_name!r}: {err}") from None
        return functools.partial(pettingzoo.make, "parallel", module_name)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        missing = err.name or ""
        if missing == "pettingzoo":
            raise ImportError(f"env {name!r} needs the pettingzoo package, which is not installed; install "
                              f"it with {install_extra('pettingzoo')}") from None
        if module_name == missing or module_name.startswith(missing + "."):
            raise ValueError(f"env {name!r}: no module named {missing!r}; check the module path (e.g. "
                             "pettingzoo:pettingzoo.butterfly.pistonball_v6) or put the directory that holds "
                             "your module on PYTHONPATH") from None
        raise ImportError(f"env {name!r}: importing {module_name} failed: {err}; install {missing!r} "
                          f"(PettingZoo's env families have extras, e.g. pip install 'pettingzoo[butterfly]')") from None
    except Exception as err:  # noqa: BLE001 (the user's code may raise anything while importing)
        raise ValueError(f"env {name!r}: importing {module_name} failed: {type(err).__name__}: {err}; fix the "
                         "module (it must import cleanly)") from None
    factory = getattr(module, "parallel_env", None)
    if not callable(factory):
        raise ValueError(f"env {name!r}: module {module_name} has no parallel_env(); pettingzoo:MODULE needs a "
                         "module with a parallel_env(**kwargs) factory of a PettingZoo ParallelEnv (an AEC env "
                         "converts with pettingzoo.utils.conversions.aec_to_parallel)")
    return factory


def _import_registering_module(name: str, module: str) -> None:
    """Imports the module of a "gymnasium:module:Id" name; ValueError naming it and the fix otherwise."""
    if not module.strip():
        raise ValueError(f"env {name!r} names no module before ':'; write gymnasium:MODULE:ID (MODULE registers "
                         "ID) or gymnasium:ID")
    try:
        importlib.import_module(module)
    except Exception as err:  # noqa: BLE001 (the user's code may raise anything while importing)
        missing = getattr(err, "name", None) if isinstance(err, ModuleNotFoundError) else None
        if missing and (module == missing or module.startswith(missing + ".")):
            raise ValueError(f"env {name!r}: no module named {missing!r}; the module that registers the env "
                             "must be importable: put the directory that holds it on PYTHONPATH") from None
        raise ValueError(f"env {name!r}: importing {module}, the module that registers the env, failed: "
                         f"{type(err).__name__}: {err}; fix the module (it must import cleanly)") from None


def python_env_type(name: str) -> PythonEnvType:
    """The PythonEnvType of ``name`` after checking, without creating an env, that it can be made:
    ImportError (a package to install) or ValueError (an unknown env) naming the fix otherwise."""
    prefix, target = _split(name)
    if prefix == "gymnasium":
        gym = _gymnasium(name)
        module, _, env_id = target.rpartition(":")
        if ":" in target:  # "module:Id": gymnasium.make imports the module, which registers Id; gym.spec does not
            _import_registering_module(name, module)
        try:
            spec = gym.spec(env_id)
        except gym.error.Error as err:
            where = (f"module {module} registers no such id; " if module else
                     "an env of your own is gymnasium:MODULE:ID, which imports MODULE (on PYTHONPATH) to register ID; ")
            raise ValueError(f"unknown Gymnasium env {target!r} ({err}); {where}list the ids with python -c "
                             "'import gymnasium; gymnasium.pprint_registry()'") from None
        how = "its vector_entry_point" if spec.entry_point is None else "synchronous, same-step autoreset"
        return PythonEnvType(name, f"Gymnasium vector env {target} ({how})")
    _parallel_env_factory(name, target)
    return PythonEnvType(name, f"PettingZoo parallel env {target}")


#: The reset each API declares, and what it does, for the refusal of a reset that takes neither keyword.
RESET_API = {"gymnasium": ("Gymnasium's API", "calls super().reset(seed=seed) to seed self.np_random and returns "
                           "(observation, info) (an env written for the old gym API took no seed)"),
             "pettingzoo": ("a ParallelEnv", "seeds the env's random numbers from seed and returns (observations, "
                            "infos)")}


def _reset_with(env, name: str, **kwargs):
    """``env.reset(**kwargs)`` (seed, options); ValueError naming the env ``name`` and the signature to write
    when its reset does not take those keywords (Python's TypeError 'reset() got an unexpected keyword
    argument' names neither the env nor the API)."""
    try:
        return env.reset(**kwargs)
    except ValueError as err:
        if "Seed must be between 0 and 2**32 - 1" not in str(err) or kwargs.get("seed") is None:
            raise
        raise ValueError(f"env {name!r}: its reset(seed=...) failed for seed {kwargs['seed']} (env i takes that seed "
                         f"+ i): {err}, as numpy's legacy np.random.seed / RandomState take; give a smaller seed "
                         "(jaxlab train --train.seed 0, jaxlab eval --seed 0), or seed from self.np_random "
                         "(super().reset(seed=seed)), which takes any") from None
    except TypeError as err:
        found = re.search(r"reset\(\) got an unexpected keyword argument '(\w+)'", str(err))
        if found is None:
            raise
        api, does = RESET_API[_split(name)[0]]
        raise ValueError(f"env {name!r}: its reset() takes no {found[1]} keyword (TypeError: {err}); the reset of "
                         f"{api} is def reset(self, seed=None, options=None), which {does}") from None


# ---- spaces ----

def _box_obs(space, name: str) -> Box:
    """The jaxlab observation space of a Gymnasium Box (uint8 kept, other dtypes as float32)."""
    import gymnasium

    if not isinstance(space, gymnasium.spaces.Box):
        wrapper = "gymnasium.wrappers.FlattenObservation" if name.startswith("gymnasium:") else "supersuit.flatten_v0"
        raise ValueError(f"env {name!r} has observation space {space}; jaxlab takes Box observations: "
                         f"{_how_to_wrap(name, wrapper)}")
    if 0 in space.shape:
        raise ValueError(f"env {name!r} has observation space {space}, of no values: jaxlab needs at least one "
                         "number per observation")
    dtype = np.dtype(np.uint8) if space.dtype == np.uint8 else np.dtype(np.float32)
    low = tuple(float(x) for x in np.broadcast_to(space.low, space.shape).ravel())
    high = tuple(float(x) for x in np.broadcast_to(space.high, space.shape).ravel())
    return Box(low, high, tuple(space.shape), dtype)


def _action(space, name: str) -> tuple:
    """(jaxlab action space, start offsets added before the env sees an action, or None)."""
    import gymnasium

    spaces = gymnasium.spaces
    if isinstance(space, (spaces.Box, spaces.MultiDiscrete)) and space.shape == (0,):
        raise ValueError(f"env {name!r} has action space {space}, of no components: jaxlab needs at least one")
    if isinstance(space, spaces.Discrete):
        return Discrete(int(space.n)), int(space.start)
    if isinstance(space, spaces.MultiDiscrete) and space.nvec.ndim == 1:
        return MultiDiscrete(tuple(int(n) for n in space.nvec)), np.asarray(space.start, np.int64)
    if isinstance(space, spaces.Box) and len(space.shape) == 1 and not np.issubdtype(space.dtype, np.floating):
        # jaxlab's Box actions are float32 (a Gaussian's samples): an env of integer Box actions would be
        # handed fractions it never declared
        raise ValueError(f"env {name!r} has action space {space}, a Box of integers; jaxlab's Box actions are "
                         "continuous float32: wrap the env so that its actions are a MultiDiscrete (with "
                         "start=low, nvec=high-low+1) or a float Box")
    if isinstance(space, spaces.Box) and len(space.shape) == 1:
        return Box(tuple(float(x) for x in space.low), tuple(float(x) for x in space.high), tuple(space.shape)), None
    raise ValueError(f"env {name!r} has action space {space}; jaxlab takes Discrete, 1-D MultiDiscrete and "
                     f"1-D Box actions: give it one with an ActionWrapper of yours; "
                     f"{_how_to_wrap(name, 'MyActionWrapper')}")


def _how_to_wrap(name: str, wrapper: str) -> str:
    """How to train the env ``name`` wrapped in ``wrapper`` (a callable's name), in the words of a message:
    for Gymnasium, an id registered in a module of the user's; for PettingZoo, their parallel_env()."""
    prefix, target = _split(name)
    if prefix == "pettingzoo":
        return f"make your parallel_env() return the env wrapped, e.g. {wrapper}(env)"
    return (f"register the env wrapped in a module of yours, e.g. gymnasium.register('Wrapped-v0', entry_point="
            f"lambda **kw: {wrapper}(gymnasium.make({target!r}, **kw))), and train gymnasium:MODULE:Wrapped-v0")


def _dict_observation(space) -> tuple:
    """(the space of the observations, whether they come in a Dict, whether it holds "action_mask") of an
    env's observation space: a Dict with an "observation" entry (the layout of masked PettingZoo envs,
    {"observation": Box, "action_mask": one entry per action}) gives that entry's space."""
    import gymnasium

    if isinstance(space, gymnasium.spaces.Dict) and "observation" in space.spaces:
        return space["observation"], True, "action_mask" in space.spaces
    return space, False, False


def _check_masked_dict(space, action, name: str, reads_observation_entry: bool = False) -> None:
    """ValueError when an env's Dict observation space holds "action_mask" (or, with
    ``reads_observation_entry``, as PettingZoo's adapter reads any Dict's, "observation") but is not the
    layout jaxlab reads ({"observation": a Box[, "action_mask"]}, a mask over Discrete or MultiDiscrete
    actions): the flatten recipe of _box_obs's refusal would make the mask one more input and drop the
    masking, reading "observation" alone would drop the other entries, and a mask over continuous actions
    would mask nothing."""
    import gymnasium

    if not isinstance(space, gymnasium.spaces.Dict):
        return
    entries = set(space.spaces)
    if "action_mask" not in entries and not (reads_observation_entry and "observation" in entries):
        return
    layout = ("jaxlab reads a Dict observation as {'observation': a Box, 'action_mask': one entry per action}, "
              "the layout of masked PettingZoo envs")
    if "action_mask" in entries:
        layout += " (flattening the Dict would make the mask an input and drop the masking)"
    others = sorted(entries - {"observation", "action_mask"})
    if others or "observation" not in entries:
        held = "'action_mask'" if "action_mask" in entries else "'observation'"
        what = f"other entries {others}" if "observation" in entries else "no 'observation' entry"
        raise ValueError(f"env {name!r} has observation space {space}, with {held} and {what}; {layout}: "
                         f"put the other observations into one Box under 'observation' with an ObservationWrapper "
                         f"of yours; {_how_to_wrap(name, 'MyObservationWrapper')}")
    if not isinstance(space["observation"], gymnasium.spaces.Box):
        raise ValueError(f"env {name!r} has observation space {space}, whose 'observation' is "
                         f"{space['observation']}, not a Box; {layout}: make 'observation' a Box with an "
                         f"ObservationWrapper of yours; {_how_to_wrap(name, 'MyObservationWrapper')}")
    if isinstance(action, Box) and "action_mask" in entries:
        raise ValueError(_continuous_mask_problem(name, f"its observation space {space}", action, "observations"))


def _continuous_mask_problem(name: str, where: str, action: Box, leave_out_of: str) -> str:
    """The refusal of an "action_mask" (in ``where``) of an env whose ``action`` space is continuous."""
    return (f"env {name!r} has an 'action_mask' in {where} and action space {action}; an action mask masks "
            f"Discrete or MultiDiscrete actions, not continuous ones: leave the mask out of the {leave_out_of}")


def _mask_width(action) -> int:
    return action.n if isinstance(action, Discrete) else sum(action.nvec) if isinstance(action, MultiDiscrete) else 0


# ---- the shared part ----

class PythonVecEnv:
    """The VecEnv interface (buffers, flags, statistics, errors) over Python envs; subclasses step them.

    Subclasses set ``spaces`` and call ``_setup()``, then implement ``_reset(seed)`` and
    ``_step(actions)``, which write the buffers (see the module docstring) and return the rows whose
    episode ended in the step (bool [A]), and ``_close()``."""

    has_state = False  # the trainer's checkpoints leave out "env" for such an env
    _nan_reward_causes = ""  # what else an env may have returned that the rewards hold as NaN, for the message

    def _setup(self, name: str, kind: PythonEnvType, num_envs: int, seed: int, mask_check: str) -> None:
        self.name, self.num_envs, self.seed, self.num_threads = name, int(num_envs), int(seed), 1
        self.params: dict = {}
        self.mask_check = mask_check
        sp = self.spaces
        self.kind = replace(kind, options=frozenset({"mask"} if sp.has_mask else set())
                            | ({"agents_wait"} if sp.agents_wait else set()))
        self.agents_per_env, self.has_mask = sp.agents_per_env, sp.has_mask
        self.num_agents = A = self.num_envs * sp.agents_per_env
        self.observation_space, self.action_space = sp.observation_space, sp.action_space
        obs, act = sp.observation_space, sp.action_space
        self.buffers = b = allocate(A, obs.shape, obs.dtype, act.shape, act.dtype,
                                    sp.mask_width if sp.has_mask else 0, sp.agents_wait)
        self.observations, self.rewards, self.terminals, self.truncations = (
            b.observations, b.rewards, b.terminals, b.truncations)
        self.action_mask, self.active = b.action_mask, b.active
        self.final_observations, self.actions = b.final_observations, b.actions
        self._action_shape, self._action_dtype = self.actions.shape, self.actions.dtype
        if isinstance(act, Box):
            self._low, self._high = np.asarray(act.low, np.float32), np.asarray(act.high, np.float32)
        self._returns = np.zeros(A)                 # running return and length of every agent's episode
        self._lengths = np.zeros(A, np.int64)
        self.episode_ends = self.episode_stats = None
        self._lock = threading.Lock()
        self._steps = 0
        self._started = False
        self._closed = False

    # ---- the VecEnv interface ----

    def reset(self, seed: int | None = None) -> np.ndarray:
        """Starts a new episode in every env; returns observations [A, *obs_shape] (the buffer).
        ``seed``: reseed env i with seed + i first; None continues each env's random stream (the first
        reset of a new VecEnv uses the seed it was made with)."""
        _check_seed(seed, allow_none=True)
        seed = None if seed is None else int(seed)  # Gymnasium's vector env seeds env i with seed + i for an int only
        with self._lock:
            self._check_open()
            if self.active is not None:
                self.active.fill(1)  # before _reset, which clears the rows of agents its reset leaves out
            self._reset(self.seed if seed is None and not self._started else seed)
            self._started = True
            for buffer in (self.rewards, self.terminals, self.truncations, self._returns, self._lengths):
                buffer.fill(0)
        return self.observations

    def step(self, actions=None):
        """Steps every agent once; envs whose episode ended are reset within the same call. Same
        arguments, return value and errors as VecEnv.step: (observations, rewards, terminals,
        truncations, info), info {} or {"episodes": n, "episode_return": mean, "episode_length": mean}
        over the n agent-episodes that ended."""
        with self._lock:
            self._check_open()
            if not self._started:
                raise RuntimeError(f"VecEnv '{self.name}' was stepped before any reset: its envs have no "
                                   "episode yet; call reset() first")
            if actions is not None and actions is not self.actions:
                if (type(actions) is not np.ndarray or actions.dtype != self._action_dtype
                        or actions.shape != self._action_shape or not actions.flags.c_contiguous):
                    actions = VecEnv._check_actions(self, actions)  # the C envs' checks and messages
                np.copyto(self.actions, actions)
            self._check_action_values()
            acting = None if self.active is None else self.active.copy()
            ended = self._step(self._env_actions())
            self._check_rewards()
            if acting is not None:
                ended &= acting  # a waiting agent's rows (terminal 1) are not episodes
            self._steps += 1
            info = self._statistics(ended, acting)
        return self.observations, self.rewards, self.terminals, self.truncations, info

    def track_episodes(self) -> None:
        """From now on, after every step ``episode_ends`` [num_envs] int32 holds how many agent-episodes
        each env ended in it and ``episode_stats`` [num_envs, 2] float32 the sums of episode_return and
        episode_length over them (as VecEnv.track_episodes)."""
        if self.episode_ends is None:
            self.episode_ends = aligned_empty((self.num_envs,), np.int32)
            self.episode_stats = aligned_empty((self.num_envs, len(LOG_NAMES)), np.float32)
            self.episode_ends.fill(0)
            self.episode_stats.fill(0)

    def _statistics(self, ended: np.ndarray, acting: np.ndarray | None) -> dict:
        """Adds the step to every acting agent's running return and length; returns the step's info
        and fills episode_ends / episode_stats when tracked."""
        if acting is None:
            self._returns += self.rewards
            self._lengths += 1
        else:
            self._returns += np.where(acting, self.rewards, 0.0)
            self._lengths += acting
        if self.episode_ends is not None:
            self.episode_ends.fill(0)
        if not ended.any():
            return {}
        rows = np.flatnonzero(ended)
        returns, lengths = self._returns[rows], self._lengths[rows].astype(np.float64)
        self._returns[rows] = 0.0
        self._lengths[rows] = 0
        if self.episode_ends is not None:
            envs = rows // self.agents_per_env
            self.episode_ends[:] = np.bincount(envs, minlength=self.num_envs)
            self.episode_stats[:, 0] = np.bincount(envs, returns, minlength=self.num_envs)
            self.episode_stats[:, 1] = np.bincount(envs, lengths, minlength=self.num_envs)
        return {"episodes": int(rows.size), "episode_return": float(returns.mean()),
                "episode_length": float(lengths.mean())}

    def _check_rewards(self) -> None:
        """ValueError from ``_misfit`` naming the first row whose reward [A] the step made NaN or infinite: the
        returns, advantages and losses of the whole batch would become NaN, with no error."""
        bad = np.flatnonzero(~np.isfinite(self.rewards))
        if bad.size:
            row = int(bad[0])
            raise self._misfit(row, f"its step() returned the reward {self.rewards[row]}{self._nan_reward_causes}; a "
                                    "reward must be a finite number (0.0 when it earned none): training would turn "
                                    "every return and loss of the batch into NaN")

    def _check_action_values(self) -> None:
        """Actions in range (Discrete, MultiDiscrete), not NaN (Box), and legal under the mask when
        mask_check is strict; ValueError naming the agent otherwise, before any env is stepped."""
        space, actions = self.action_space, self.actions
        if isinstance(space, Box):
            if np.isnan(actions).any():
                agent = int(np.flatnonzero(np.isnan(actions).any(axis=1))[0])
                raise ValueError(f"agent {agent} has a NaN action; actions for '{self.name}' must be finite "
                                 f"numbers (they are clipped to {space})")
            return
        nvec = np.asarray([space.n] if isinstance(space, Discrete) else space.nvec)
        columns = actions.reshape(self.num_agents, -1)
        bad = (columns < 0) | (columns >= nvec)
        if bad.any():
            agent, comp = (int(i) for i in np.argwhere(bad)[0])
            where = f"agent {agent}" + (f" component {comp}" if actions.ndim > 1 else "")
            raise ValueError(f"{where} has action {int(columns[agent, comp])}, out of range for {space}: it "
                             f"must be in [0, {nvec[comp] - 1}]")
        if self.action_mask is not None and self.mask_check == "strict":
            self._check_mask(columns, nvec)

    def _check_mask(self, columns: np.ndarray, nvec: np.ndarray) -> None:
        acting = np.ones(self.num_agents, bool) if self.active is None else self.active
        offsets = np.concatenate([[0], np.cumsum(nvec)[:-1]])
        rows = np.arange(self.num_agents)
        for comp, (offset, n) in enumerate(zip(offsets, nvec)):
            block = self.action_mask[:, offset:offset + n]
            part = f" component {comp}" if len(nvec) > 1 else ""
            empty = np.flatnonzero(acting & ~block.any(axis=1))
            illegal = np.flatnonzero(acting & ~block[rows, columns[:, comp]])
            if empty.size:
                agent = int(empty[0])
                what = (f"its action mask allows no action{part} (the row is all 0); the env must leave every "
                        "acting agent at least one legal action")
            elif illegal.size:
                agent = int(illegal[0])
                legal = ", ".join(str(k) for k in np.flatnonzero(block[agent]))
                what = f"action {int(columns[agent, comp])}{part} is not legal under its mask; legal: {legal}"
            else:
                continue
            raise ValueError(f"env '{self.name}' #{agent // self.agents_per_env} agent {agent % self.agents_per_env} "
                             f"(row {agent}) at step {self._steps}: {what} (mask_check='off' skips this check)")

    def _env_actions(self) -> np.ndarray:
        """The actions as the env takes them: Discrete and MultiDiscrete shifted by the space's start,
        Box clipped to its bounds."""
        if isinstance(self.action_space, Box):
            return np.clip(self.actions, self._low, self._high)
        return self.actions + self._start if np.any(self._start) else self.actions

    def _write_mask(self, row: int, mask, where: str) -> None:
        """Writes the mask row [sum(nvec)] of ``row`` from ``mask``, what the env returned (``where``, for the
        message); ValueError from ``_misfit(row, what)`` when its shape is not one entry per action."""
        if np.shape(mask) != (self.spaces.mask_width,):
            raise self._misfit(row, f"{where} {short_repr(mask)} has shape {np.shape(mask)}; its action space "
                                    f"{self.action_space} needs a mask of shape ({self.spaces.mask_width},), one "
                                    "entry per action")
        self.action_mask[row] = np.asarray(mask).astype(bool)

    def render(self, index: int = 0) -> None:
        """None: Python envs have no text rendering in jaxlab."""
        return None

    # ---- no env state in checkpoints ----

    def _no_state(self):
        return EnvStateError(f"jaxlab cannot save or load the state of the Python env '{self.name}' (a Python "
                             "object, not C memory): a checkpoint of a run with it holds no env state, and a "
                             "resumed run starts new episodes; use a C env for bit-exact resumes")

    def save_state(self):
        """Raises EnvStateError: a Python env's state cannot be saved (see the module docstring)."""
        raise self._no_state()

    def state_shapes(self):
        """Raises EnvStateError, as save_state."""
        raise self._no_state()

    def load_state(self, state) -> None:
        """Raises EnvStateError, as save_state."""
        raise self._no_state()

    # ---- lifecycle ----

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"VecEnv '{self.name}' is closed; create a new one with "
                               f"jaxlab.make('{self.name}', ...)")

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Closes the Python envs. Safe to call twice."""
        lock = getattr(self, "_lock", None)
        if lock is None:
            return
        with lock:
            if not self._closed:
                self._closed = True
                self._close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"{type(self).__name__}('{self.name}', num_envs={self.num_envs}, agents={self.num_agents}, "
                f"obs={self.observation_space}, action={self.action_space})")


def _check_args(num_envs, seed, num_threads, mask_check) -> None:
    """The checks VecEnv makes of its arguments, with its messages."""
    if mask_check not in ("strict", "off"):
        raise ValueError(f"mask_check={mask_check!r} must be 'strict' or 'off'")
    for label, value in (("num_envs", num_envs), ("num_threads", num_threads)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"{label}={value!r} must be an integer >= 1")
    _check_seed(seed, allow_none=False)


def _check_seed(seed, allow_none: bool) -> None:
    if seed is None and allow_none:
        return
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed < 2**64:
        raise ValueError(f"seed={seed!r} must be {'None or ' if allow_none else ''}an integer in [0, 2**64)")


# ---- Gymnasium ----

class GymnasiumVecEnv(PythonVecEnv):
    """``num_envs`` copies of the Gymnasium env ``env_id`` in one synchronous vector env with
    autoreset_mode SAME_STEP; env i is seeded with seed + i (Gymnasium's rule). One agent per env."""

    _nan_reward_causes = " (or None, which Gymnasium's vector env stores as nan)"

    def __init__(self, env_id: str, num_envs: int = 1, seed: int = 0, num_threads: int = 1,
                 mask_check: str = "strict", **kwargs):
        name = f"gymnasium:{env_id}"
        _check_args(num_envs, seed, num_threads, mask_check)
        kind = python_env_type(name)
        gym = _gymnasium(name)
        mode = gym.vector.AutoresetMode.SAME_STEP
        self._vec = vec = _make_vector_env(gym, env_id, int(num_envs), kwargs)
        try:
            if vec.metadata.get("autoreset_mode") != mode:
                raise ValueError(f"env {name!r}: the vector env autoresets in mode "
                                 f"{vec.metadata.get('autoreset_mode')}, jaxlab needs SAME_STEP (a VectorEnv of your "
                                 "own: reset the envs whose episode ends inside step(), put their last observations "
                                 "in info['final_obs'] and info['_final_obs'], and declare metadata = "
                                 "{'autoreset_mode': gymnasium.vector.AutoresetMode.SAME_STEP})")
            _check_distinct([env.unwrapped for env in getattr(vec, "envs", ())], name, "its entry point")
            self.spaces = self._read_spaces(name)
            self._setup(name, kind, num_envs, seed, mask_check)
        except BaseException:
            vec.close()
            raise

    def _read_spaces(self, name: str) -> EnvSpaces:
        """The spaces of the vector env's single env: a Box observation space, or a Dict of "observation" (a
        Box) and "action_mask" over Discrete or MultiDiscrete actions, read as PettingZoo's (``_masked``)."""
        action, self._start = _action(self._vec.single_action_space, name)
        declared = self._vec.single_observation_space
        _check_masked_dict(declared, action, name)
        obs_space, dict_obs, mask_entry = _dict_observation(declared)
        self._masked = dict_obs and mask_entry  # the Dict other than {"observation", "action_mask"}: refused whole
        self._declared = obs_space if self._masked else declared
        width = _mask_width(action) if self._masked else 0
        return EnvSpaces(1, _box_obs(self._declared, name), action, self._masked, width)

    def _unpack(self, call: str, obs):
        """The observations [num_envs, *obs_shape] in ``obs``, what the vector env's ``call`` returned; for a
        masked env (a dict of batches), after writing the mask rows [num_envs, sum(nvec)] from its
        "action_mask"."""
        if not self._masked:
            return obs
        if not isinstance(obs, dict) or not {"observation", "action_mask"} <= obs.keys():
            raise ValueError(f"env '{self.name}': its vector env's {call} returned observations {short_repr(obs)}, "
                             "not a dict of 'observation' and 'action_mask' batches as its declared "
                             f"single_observation_space {self._vec.single_observation_space} says")
        masks = obs["action_mask"]
        if np.ndim(masks) == 0 or len(masks) != self.num_envs:
            raise ValueError(f"env '{self.name}': its vector env's {call} returned 'action_mask' {short_repr(masks)} "
                             f"of shape {np.shape(masks)}; jaxlab needs one mask per env, {self.num_envs} rows")
        for row in range(self.num_envs):
            self._write_mask(row, masks[row], "its observation's 'action_mask'")
        return obs["observation"]

    def _misfit(self, row: int, what: str) -> ValueError:
        """The error for what the env of ``row`` returned."""
        return ValueError(f"env '{self.name}' #{row} at step {self._steps}: {what}")

    def _reset(self, seed: int | None) -> None:
        try:
            obs, _ = _reset_with(self._vec, self.name, seed=seed)
        except (ValueError, TypeError, AttributeError) as err:
            self._refuse_old_api(err)
            if isinstance(err, AttributeError) or not _raised_by_vector_env(err):
                raise
            raise self._vector_misfit("reset()", err) from None
        obs = self._unpack("reset()", obs)
        self._check_batch("reset()", "observations", obs, self.observations)
        self.observations[...] = obs

    def _step(self, actions: np.ndarray) -> np.ndarray:
        try:
            obs, rewards, terminated, truncated, info = self._vec.step(actions)
        except (ValueError, TypeError, AttributeError) as err:
            self._refuse_old_api(err)
            if isinstance(err, AttributeError) or not _raised_by_vector_env(err):
                raise
            raise self._vector_misfit("step()", err) from None
        obs = self._unpack("step()", obs)
        for what, value, buffer in (("observations", obs, self.observations), ("rewards", rewards, self.rewards),
                                    ("terminations", terminated, self.terminals),
                                    ("truncations", truncated, self.truncations)):
            self._check_batch("step()", what, value, buffer)
        self.observations[...] = obs
        self.rewards[...] = rewards
        self.terminals[...] = terminated
        np.logical_and(truncated, ~self.terminals, out=self.truncations)  # both: a terminal
        ended = self.terminals | self.truncations
        if ended.any():
            if not np.array_equal(info.get("_final_obs", np.zeros_like(ended)), ended):
                raise RuntimeError(f"env '{self.name}': the vector env ended episodes without final "
                                   "observations in its info; jaxlab needs autoreset_mode SAME_STEP")
            for row in np.flatnonzero(ended):
                final = info["final_obs"][row]
                if self._masked and isinstance(final, dict):
                    final = final.get("observation", final)
                self._check_batch("step()", "info['final_obs'] rows", final, self.final_observations[row])
                self.final_observations[row] = final
        return ended

    def check_api(self) -> None:
        """ValueError when the first env, unwrapped, is written for the old gym API: its reset returns no
        (observation, info) pair or its step (with a sampled action) no 5 values. The vector env's own
        errors for such envs name neither ('not enough values to unpack', 'numpy.float32' object has no
        attribute 'items'). Resets and steps that env once, with an action legal under the mask of a masked
        env (spaces_of calls it on the env it makes to read the spaces, before the first reset); a step
        that raises is left to the run."""
        envs = getattr(self._vec, "envs", None)
        if not envs:  # a VectorEnv of the user's own: its reset and step are the vector env's
            return
        env = envs[0].unwrapped
        result = _reset_with(env, self.name, seed=self.seed)
        if not (isinstance(result, tuple) and len(result) == 2 and isinstance(result[1], dict)):
            raise ValueError(f"env '{self.name}': its reset() returned {_words(result)}, not the pair (observation, "
                             "info) of Gymnasium's API; return obs, {} (an env written for the old gym API returned "
                             "the observation alone)")
        try:
            result = env.step(_legal_sample(env.action_space, result[0]))
        except Exception:  # noqa: BLE001 (the env's own errors show where the run meets them)
            return
        if not (isinstance(result, tuple) and len(result) == 5):
            raise ValueError(f"env '{self.name}': its step() returned {_words(result)}, not the 5 values "
                             "(observation, reward, terminated, truncated, info) of Gymnasium's API (an env written "
                             "for the old gym API returned 4: obs, reward, done, info; done is now terminated, "
                             "an episode's true end, and truncated, a time limit's cut)")

    def _refuse_old_api(self, err: Exception) -> None:
        """Raises check_api's refusal when ``err``, raised by Gymnasium itself (its wrappers or vector env) in a
        reset or step, comes from an env of the old gym API ('not enough values to unpack (expected 5, got 4)',
        'numpy.float64' object has no attribute 'items': neither names the env nor the API; jaxlab.make does
        not run check_api before its first reset, as spaces_of does); returns otherwise, ``err`` to be raised."""
        if not _innermost_module(err).startswith("gymnasium"):
            return
        try:
            self.check_api()
        except Exception as found:  # noqa: BLE001 (the env's own errors in check_api leave err as it is)
            if isinstance(found, ValueError) and str(found).startswith(f"env '{self.name}': its "):
                raise found from None

    def _check_batch(self, call: str, what: str, value, buffer: np.ndarray) -> None:
        """ValueError when ``value``, what the vector env's ``call`` returned as ``what``, is not of the
        shape of ``buffer`` ([num_envs, ...]: numpy would broadcast one env's observation or one reward
        over every row; one row of final_observations for a final observation) or, for observations, of
        a dtype the buffer cannot hold by numpy's same_kind rule. A SyncVectorEnv's arrays always fit; a
        VectorEnv of the user's own (vector_entry_point) may not."""
        dtype = np.asarray(value).dtype
        observations = what in ("observations", "info['final_obs'] rows")
        if np.shape(value) == buffer.shape and (not observations or np.can_cast(dtype, buffer.dtype, "same_kind")):
            return
        space = self._vec.single_observation_space
        if what == "observations":
            needs = (f"one observation per env, shape {buffer.shape} ({self.num_envs} x the shape of its "
                     f"single_observation_space {space}), of a dtype that casts to {buffer.dtype}")
        elif observations:
            needs = (f"the shape {buffer.shape} of its single_observation_space {space}, of a dtype that casts "
                     f"to {buffer.dtype}")
        else:
            needs = f"one {'number' if what == 'rewards' else 'flag'} per env, shape {buffer.shape}"
        raise ValueError(f"env '{self.name}': its vector env's {call} returned {what} of shape {np.shape(value)} "
                         f"and dtype {dtype}; jaxlab needs {needs}")

    def _vector_misfit(self, call: str, err: Exception) -> ValueError:
        """The error for what the vector env could not put in its arrays (numpy's message alone names
        neither the env nor the space)."""
        space, box = self._vec.single_observation_space, self._declared
        reward = " (or a reward that is not one number)" if call == "step()" else ""
        mask = f" and 'action_mask' of shape ({self.spaces.mask_width},)" if self._masked else ""
        return ValueError(f"env '{self.name}': its {call} returned values that do not fit its declared "
                          f"observation_space {space}{reward}: Gymnasium's vector env says {type(err).__name__}: "
                          f"{str(err).rstrip('.')}; make the env return observations of shape {box.shape} and dtype "
                          f"{box.dtype}{mask} (or declare the space it returns)")

    def _close(self) -> None:
        self._vec.close()


def _legal_sample(space, observation):
    """A random action of the Gymnasium action ``space``, legal under ``observation``'s "action_mask" when
    it is a dict with a mask of the space's width (Discrete or 1-D MultiDiscrete), for the env may punish an
    illegal action; else any."""
    import gymnasium

    mask = observation.get("action_mask") if isinstance(observation, dict) else None
    mask = None if mask is None else np.asarray(mask).astype(bool).astype(np.int8)
    if isinstance(space, gymnasium.spaces.Discrete) and np.shape(mask) == (space.n,):
        return space.sample(mask=mask)
    if isinstance(space, gymnasium.spaces.MultiDiscrete) and np.shape(mask) == (int(np.sum(space.nvec)),):
        return space.sample(mask=tuple(np.split(mask, np.cumsum(space.nvec)[:-1])))
    return space.sample()


def _make_vector_env(gym, env_id: str, num_envs: int, kwargs: dict):
    """The vector env of ``env_id``: a SyncVectorEnv of its envs with autoreset_mode SAME_STEP, or, for
    an id registered with only a ``vector_entry_point`` (a gymnasium.vector.VectorEnv of the user's own,
    which is its own vectoriser; python_env_type's description says which), that VectorEnv made with
    ``kwargs``."""
    spec = gym.spec(env_id.rpartition(":")[2])
    if spec.entry_point is None:
        return gym.make_vec(env_id, num_envs=num_envs, vectorization_mode="vector_entry_point", **kwargs)
    mode = gym.vector.AutoresetMode.SAME_STEP
    return gym.make_vec(env_id, num_envs=num_envs, vectorization_mode="sync",
                        vector_kwargs={"autoreset_mode": mode, "copy": False}, wrappers=[_step_copies(gym)], **kwargs)


@functools.cache
def _step_copies(gym):
    """The gymnasium.Wrapper class whose step returns a copy of the observation its env's step returned.
    The SyncVectorEnv keeps that observation as the episode's final one (info["final_obs"]) and then resets
    the env: an env that changes one array in place and returns it (``self.obs[0] += 1; return self.obs,
    ...``) would overwrite the final observation with the next episode's first, and a truncated episode's
    value would be bootstrapped from that, silently."""

    class StepCopies(gym.Wrapper):
        def step(self, action):
            result = self.env.step(action)
            return (_copied(result[0]), *result[1:]) if isinstance(result, tuple) and result else result

    return StepCopies


def _copied(observation):
    """A copy of ``observation``'s arrays (an array, or a dict of them, as a masked env's), other values as
    they are."""
    if isinstance(observation, np.ndarray):
        return observation.copy()
    if isinstance(observation, dict):
        return {key: _copied(value) for key, value in observation.items()}
    return observation


def _check_distinct(envs: list, name: str, maker: str) -> None:
    """ValueError when ``maker`` returned one env object more than once among ``envs`` (a module-level
    instance returned by every call): each of jaxlab's envs would step that one object, several times
    a step, with no error."""
    if len({id(env) for env in envs}) < len(envs):
        raise ValueError(f"env {name!r}: {maker} returned the same env object for several of jaxlab's "
                         f"{len(envs)} envs, which would all step that one object; make a new env on every call "
                         "(return MyEnv(**kwargs), not an instance made once)")


def _words(result) -> str:
    """What an env's reset or step returned, for a message: "a tuple of 4", or the value and its type."""
    if isinstance(result, tuple):
        return f"a tuple of {len(result)}"
    return f"{short_repr(result)} ({type(result).__name__})"


def _raised_by_vector_env(err: Exception) -> bool:
    """Whether ``err`` comes from Gymnasium's vector env itself (putting what an env returned into its
    batched arrays, where numpy raises) and not from inside one of its envs: its innermost frame outside
    numpy is in gymnasium.vector."""
    return _innermost_module(err).startswith("gymnasium.vector")


def _innermost_module(err: Exception) -> str:
    """The module of the innermost frame of ``err``'s traceback outside numpy."""
    module, tb = "", err.__traceback__
    while tb is not None:
        name = tb.tb_frame.f_globals.get("__name__", "")
        if not name.startswith("numpy"):
            module = name
        tb = tb.tb_next
    return module


# ---- PettingZoo ----

def _parallel_env(env, name: str, module: str):
    """``env``, what the factory of ``module`` returned, when it is a PettingZoo ParallelEnv; ValueError
    naming what it is otherwise."""
    _import_package("pettingzoo", name)
    from pettingzoo.utils.env import AECEnv, ParallelEnv

    if isinstance(env, ParallelEnv):
        return env
    hint = ("an AEC env converts with pettingzoo.utils.conversions.aec_to_parallel" if isinstance(env, AECEnv)
            else "subclass pettingzoo.ParallelEnv")
    raise ValueError(f"env {name!r}: {module}.parallel_env() returned {short_repr(env)} ({type(env).__name__}), "
                     f"not a PettingZoo ParallelEnv; make it return one ({hint})")


NO_REWARD = object()  # what a ParallelEnv's step left out of its rewards for an agent that acted

#: What a ParallelEnv's reset and step return, and what envs written for PettingZoo's older API returned.
PARALLEL_API = {"reset": ("observations, infos", "the observations alone"),
                "step": ("observations, rewards, terminations, truncations, infos",
                         "observations, rewards, dones, infos: dones is now terminations and truncations")}


def _returned(result, call: str, name: str, e: int) -> tuple:
    """``result``, what a ParallelEnv's ``call`` ("reset" or "step") returned, when it is the tuple of
    dicts of PettingZoo's API; ValueError naming the env and the old API it looks like otherwise (the
    unpacking would fail with 'too many values to unpack', or an observation dict of two agents
    unpack into its two keys)."""
    fields, old = PARALLEL_API[call]
    count = fields.count(",") + 1
    if isinstance(result, tuple) and len(result) == count and isinstance(result[0], dict):
        return result
    raise ValueError(f"env '{name}' #{e}: its {call}() returned {_words(result)}, not the tuple ({fields}) of a "
                     f"ParallelEnv; return those {count} dicts (an env written for PettingZoo's older API returned "
                     f"{old})")


class _Returned:
    """The observations that envs returned in one step (or reset), to write at its end: ``rows`` [n], the
    observations as returned (for the messages), and each env's stacked when it returned them, a copy
    [rows of that env, *obs_shape] (an env may change the arrays it returned, e.g. in its reset), or None
    when they do not stack (different shapes)."""

    def __init__(self):
        self.rows: list[int] = []
        self.returned: list = []
        self.stacks: list[np.ndarray | None] = []

    def add(self, rows: list[int], observations: list) -> None:
        """One env's ``observations``, one per row of ``rows``."""
        if not rows:
            return
        self.rows += rows
        self.returned += observations
        try:
            self.stacks.append(np.array(observations))
        except (ValueError, TypeError):
            self.stacks.append(None)

    def stacked(self) -> np.ndarray | None:
        """Every row's observation [n, ...], or None when the envs' stacks do not stack together."""
        if any(stack is None for stack in self.stacks):
            return None
        try:
            return np.concatenate(self.stacks)
        except ValueError:
            return None


class PettingZooVecEnv(PythonVecEnv):
    """``num_envs`` PettingZoo parallel envs from ``MODULE.parallel_env(**kwargs)``, stepped one after
    the other; env e is seeded with seed + e. Every agent of ``possible_agents`` has a row; all must
    share one observation space and one action space. An agent whose episode ends before its env's
    waits (``active``) until the env resets, which happens when ``env.agents`` is empty."""

    def __init__(self, module: str, num_envs: int = 1, seed: int = 0, num_threads: int = 1,
                 mask_check: str = "strict", **kwargs):
        name = f"pettingzoo:{module}"
        _check_args(num_envs, seed, num_threads, mask_check)
        factory = _parallel_env_factory(name, module)
        self._envs = []
        try:
            for _ in range(int(num_envs)):
                self._envs.append(_parallel_env(factory(**kwargs), name, module))
            _check_distinct(self._envs, name, f"{module}.parallel_env()")
            self._describe(name, int(seed))
            self._setup(name, PythonEnvType(name, f"PettingZoo parallel env {module}"), num_envs, seed, mask_check)
        except BaseException:
            self._close()
            raise

    def _describe(self, name: str, seed: int) -> None:
        env = self._envs[0]
        self.agent_names = agents = tuple(env.possible_agents)
        if not agents:
            raise ValueError(f"env {name!r} has no possible_agents")
        obs_spaces = [env.observation_space(a) for a in agents]
        act_spaces = [env.action_space(a) for a in agents]
        for kind, spaces in (("observation", obs_spaces), ("action", act_spaces)):
            for agent, space in zip(agents, spaces):
                if space != spaces[0]:
                    raise ValueError(f"env {name!r}: agent {agent!r} has {kind} space {space}, agent "
                                     f"{agents[0]!r} {spaces[0]}; jaxlab needs one space for all agents (pad "
                                     "them, e.g. with supersuit.pad_observations_v0 / pad_action_space_v0)")
        action, self._start = _action(act_spaces[0], name)
        _check_masked_dict(obs_spaces[0], action, name, reads_observation_entry=True)
        obs_space, self._dict_obs, has_mask = _dict_observation(obs_spaces[0])
        self._declared = obs_space  # the env's own space, for the messages of _write
        self._info_mask = False
        if not has_mask:  # masks in the infos show only there: look at one reset
            _, infos = _returned(_reset_with(env, name, seed=int(seed)), "reset", name, 0)
            has_mask = self._info_mask = any("action_mask" in (infos or {}).get(a, {}) for a in agents)
            if has_mask and isinstance(action, Box):
                raise ValueError(_continuous_mask_problem(name, "the infos its reset returns", action, "infos"))
        width = _mask_width(action) if has_mask else 0
        self.spaces = EnvSpaces(len(agents), _box_obs(obs_space, name), action, has_mask, width,
                                agents_wait=len(agents) > 1)
        self._index = {agent: j for j, agent in enumerate(agents)}

    def _observation(self, row: int, observation, info):
        """One agent's observation array from what its env returned (a dict observation's "observation"),
        after writing its mask row; ValueError naming the env and the agent when a dict observation is
        not one. Its shape and dtype are checked with the other rows' (_write_observations)."""
        if self._dict_obs:
            if not isinstance(observation, dict) or "observation" not in observation:
                raise self._misfit(row, f"its observation is {short_repr(observation)}, not a dict with "
                                        f"'observation' as its declared space says")
            if self.action_mask is not None and not self._info_mask:
                self._write_mask(row, observation.get("action_mask"), "its observation's 'action_mask'")
            observation = observation["observation"]
        if self._info_mask:
            mask = (info or {}).get("action_mask")
            if mask is None:
                self.action_mask[row] = True
            else:
                self._write_mask(row, mask, "the 'action_mask' of its info")
        return observation

    def _write_observations(self, returned: _Returned) -> None:
        """Writes the ``returned`` observations (distinct rows) into the observation buffer, checked as one
        stacked array [rows, *obs_shape] of a dtype the buffer holds by numpy's same_kind rule (numpy would
        broadcast a scalar or a 1-element array over a row, and cast 0.5 to 0 for a uint8 Box); when the stack
        does not fit, _check_observation names the first agent whose observation does not."""
        if not returned.rows:
            return
        stacked = returned.stacked()
        if (stacked is not None and stacked.shape == (len(returned.rows), *self.observation_space.shape)
                and np.can_cast(stacked.dtype, self.observations.dtype, "same_kind")):
            self.observations[returned.rows] = stacked
            return
        for row, observation in zip(returned.rows, returned.returned):
            self._check_observation(row, observation)
            self.observations[row] = observation  # each fits (int64 and uint64 rows stack as float64)

    def _check_observation(self, row: int, observation) -> None:
        """ValueError naming the env, the agent of ``row``, the declared space and what came back when
        ``observation`` is not of the declared shape, or of a dtype the buffer cannot hold (same_kind: a
        cast would cut 0.5 to 0; Gymnasium's vector env refuses the same: floats for a uint8 Box)."""
        if np.shape(observation) != self.observation_space.shape:
            raise self._misfit(row, f"its observation {short_repr(observation)} has shape {np.shape(observation)}, "
                                    f"not the shape of its declared observation space {self._declared}; make the "
                                    "env return observations of that shape (or declare the space it returns)")
        dtype = np.asarray(observation).dtype
        if not np.can_cast(dtype, self.observations.dtype, "same_kind"):
            raise self._misfit(row, f"its observation {short_repr(observation)} has dtype {dtype}, which the "
                                    f"dtype {self.observations.dtype} of its declared observation space "
                                    f"{self._declared} cannot hold (a cast would cut 0.5 to 0); make the env "
                                    f"return {self.observations.dtype} observations (or declare the space it returns)")

    def _misfit(self, row: int, what: str) -> ValueError:
        """The error for what the env returned for the agent of ``row``."""
        e, j = divmod(row, self.agents_per_env)
        return ValueError(f"env '{self.name}' #{e} agent {self.agent_names[j]!r} at step {self._steps}: {what}")

    def _reset_env(self, e: int, seed: int | None, returned: _Returned) -> None:
        """Resets env #``e``; its agents' observations go to ``returned``, for _write_observations."""
        observations, infos = _returned(_reset_with(self._envs[e], self.name, seed=seed), "reset", self.name, e)
        self._check_reset_agents(e, observations)
        base = e * self.agents_per_env
        rows = [base + self._index[agent] for agent in observations]
        returned.add(rows, [self._observation(row, observation, (infos or {}).get(agent))
                            for row, (agent, observation) in zip(rows, observations.items())])
        if self.active is not None:
            self.active[base:base + self.agents_per_env] = [a in self._envs[e].agents for a in self.agent_names]

    def _check_reset_agents(self, e: int, observations: dict) -> None:
        """RuntimeError when env #``e``'s reset left ``env.agents`` empty (jaxlab resets an env when its
        last agent is gone, so such an env would be reset in every step and train nothing), named an agent
        that is not in possible_agents, or returned no observation for an agent it lists (its row would
        keep the last episode's)."""
        env = self._envs[e]
        if env.agents:
            self._check_known(e, [*env.agents, *observations], "reset()")
            missing = [agent for agent in env.agents if agent not in observations]
            if missing:
                raise RuntimeError(f"env '{self.name}' #{e} at step {self._steps}: reset() returned no observation "
                                   f"for agent {missing[0]!r}, which is in env.agents; a ParallelEnv's reset returns "
                                   "an observation for every agent of the new episode")
            return
        changed = (f"; its possible_agents changed from {list(self.agent_names)} to {short_repr(env.possible_agents)}"
                   if tuple(env.possible_agents) != self.agent_names else "")
        raise RuntimeError(f"env '{self.name}' #{e} at step {self._steps}: reset() left env.agents empty{changed}; a "
                           "ParallelEnv's reset lists the agents of the new episode (a common cause: self.agents = "
                           "self.possible_agents without a copy, so that removing an ended agent from env.agents "
                           "removes it from possible_agents too; write self.agents = list(self.possible_agents))")

    def _check_known(self, e: int, agents, call: str) -> None:
        """RuntimeError naming the first of ``agents`` (what env #``e``'s ``call`` listed or returned) that
        is not one of the possible_agents jaxlab gave rows to."""
        for agent in agents:
            if agent not in self._index:
                raise RuntimeError(f"env '{self.name}' #{e} at step {self._steps}: {call} names agent {agent!r}, "
                                   f"which is not in its possible_agents {list(self.agent_names)} (read when the env "
                                   "was made); a ParallelEnv lists every agent it may have in possible_agents")

    def _reset(self, seed: int | None) -> None:
        returned = _Returned()
        for e in range(self.num_envs):
            self._reset_env(e, None if seed is None else seed + e, returned)
        self._write_observations(returned)

    def _step(self, actions: np.ndarray) -> np.ndarray:
        """Steps every env, then writes the step's observations, the final ones of the rows that ended and
        the first ones of the envs that reset, each set checked as one batch (_write_observations)."""
        apa, index = self.agents_per_env, self._index
        discrete = isinstance(self.action_space, Discrete)
        stepped, reset = _Returned(), _Returned()  # what the steps returned (joining agents too); the resets
        finals = []  # the rows of the agents whose episode ended in this step
        for e, env in enumerate(self._envs):
            base = e * apa
            rows, observed = [], []  # this env's step's
            live = list(env.agents)
            self._check_known(e, live, "env.agents")
            step = {agent: (int(actions[base + index[agent]]) if discrete else actions[base + index[agent]].copy())
                    for agent in live}
            returned = _returned(env.step(step), "step", self.name, e)
            observations, rewards, terminations, truncations, infos = returned
            infos = infos or {}
            for j, agent in enumerate(self.agent_names):
                row = base + j
                if agent not in step:  # waiting for this env's reset (as C option agents_wait), or joining
                    self.rewards[row], self.terminals[row], self.truncations[row] = 0.0, True, False
                    if self.action_mask is not None:
                        self.action_mask[row] = True
                    if agent in env.agents:  # joins the episode now: acts from the next step on
                        observed.append(self._joining(e, row, agent, observations, infos))
                        rows.append(row)
                    continue
                terminal = bool(terminations.get(agent, False))
                self.terminals[row] = terminal
                self.truncations[row] = bool(truncations.get(agent, False)) and not terminal
                self.rewards[row] = self._reward(row, rewards.get(agent, NO_REWARD))
                ended = self.terminals[row] or self.truncations[row]
                self._check_agent_list(e, agent, ended, agent in env.agents, agent in observations)
                if self.truncations[row] and agent not in observations:
                    raise RuntimeError(f"env '{self.name}' #{e} at step {self._steps} truncated agent {agent!r} "
                                       "without its last observation, which jaxlab bootstraps the cut episode's "
                                       "value from; a ParallelEnv's step returns an observation for every agent "
                                       "that acted")
                if agent in observations:
                    observed.append(self._observation(row, observations[agent], infos.get(agent)))
                    rows.append(row)
                if ended:
                    finals.append(row)
            stepped.add(rows, observed)  # stacked now: the env's reset may reuse the arrays
            if not env.agents:
                self._reset_env(e, None, reset)
            elif self.active is not None:
                self.active[base:base + apa] = [a in env.agents for a in self.agent_names]
        self._write_observations(stepped)
        self.final_observations[finals] = self.observations[finals]  # an end without an observation: its last
        self._write_observations(reset)
        return self.terminals | self.truncations

    def _joining(self, e: int, row: int, agent: str, observations: dict, infos: dict):
        """The first observation of ``agent`` (its row ``row``), which env #``e`` added to env.agents in this
        step (it acts from the next one); RuntimeError when the step returned none (its row would hold an
        observation of another episode for the policy)."""
        if agent not in observations:
            raise RuntimeError(f"env '{self.name}' #{e} at step {self._steps} added agent {agent!r} to env.agents "
                               "without an observation for it; a ParallelEnv's step returns an observation for "
                               "every agent in env.agents after it")
        return self._observation(row, observations[agent], infos.get(agent))

    def _reward(self, row: int, reward) -> float:
        """The reward the env returned for the agent of ``row``, checked: one real number (None, a string
        or an array is a ValueError naming the env and the agent, not a NaN or a cast error; NO_REWARD,
        none returned for an agent that acted, too: it is not read as 0)."""
        if reward is NO_REWARD:
            raise self._misfit(row, "it acted, and its step returned no reward for it; a ParallelEnv's step returns "
                                    "a reward for every agent that acted (0 when it earned none)")
        if np.shape(reward) != ():
            raise self._misfit(row, f"its reward {short_repr(reward)} has shape {np.shape(reward)}; a "
                                    "ParallelEnv's reward is one number per agent")
        if np.asarray(reward).dtype.kind not in "biuf":
            raise self._misfit(row, f"its reward {short_repr(reward)} is not a number; a ParallelEnv's reward "
                                    "is one number per agent")
        return float(reward)

    def _check_agent_list(self, e: int, agent: str, ended: bool, listed: bool, observed: bool) -> None:
        """RuntimeError when env #``e`` broke the ParallelEnv contract for ``agent``, which acted in this
        step: ended (``ended``) but still in env.agents, left env.agents without ending, or goes on
        without an observation (its row would keep the last one)."""
        where = f"env '{self.name}' #{e} at step {self._steps}"
        if ended and listed:
            raise RuntimeError(f"{where} flagged agent {agent!r} terminated or truncated but kept it in env.agents; "
                               "a ParallelEnv removes an agent from env.agents in the step that ends it")
        if not ended and not listed:
            raise RuntimeError(f"{where} removed agent {agent!r} from env.agents without a termination or "
                               "truncation; a ParallelEnv must flag an agent's end")
        if not ended and not observed:
            raise RuntimeError(f"{where} returned no observation for agent {agent!r}, which goes on; a "
                               "ParallelEnv's step returns an observation for every agent that acted")

    def _close(self) -> None:
        for env in self._envs:
            try:
                env.close()
            except Exception:  # noqa: BLE001 (a half-made env may not close)
                pass


def make_python_env(name: str, num_envs: int = 1, seed: int = 0, num_threads: int = 1,
                    library: str | None = None, mask_check: str = "strict", **kwargs) -> PythonVecEnv:
    """The Python env ``name`` (``gymnasium:ID`` or ``pettingzoo:MODULE``) as a VecEnv; ``kwargs`` go to
    the env's constructor. ``library`` must be None (it names C env libraries)."""
    if library:
        raise ValueError(f"library={library!r} names a C env library; {name!r} is a Python env and takes "
                         "none: leave library (env.library) unset")
    prefix, target = _split(name)
    cls = GymnasiumVecEnv if prefix == "gymnasium" else PettingZooVecEnv
    return cls(target, num_envs=num_envs, seed=seed, num_threads=num_threads, mask_check=mask_check, **kwargs)


def spaces_of(name: str, library=None, **params) -> EnvSpaces:
    """registry.spaces_of for every env name: for a Python env, the spaces of one env made with
    ``params`` as keyword arguments, reset once (what it returns must fit its spaces: ValueError
    otherwise, before any training) and closed again."""
    if not is_python_env(name):
        from jaxlab.env.registry import spaces_of as c_spaces_of

        return c_spaces_of(name, library=library, **params)
    with make_python_env(name, num_envs=1, library=library, **params) as env:
        if isinstance(env, GymnasiumVecEnv):
            env.check_api()
        env.reset()
        return env.spaces

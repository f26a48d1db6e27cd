"""Python envs through jaxlab.make: Gymnasium vector envs and PettingZoo parallel envs in the VecEnv
interface, checked by value against the envs stepped by hand (flags, final observations, statistics,
layout, masks, seeds), their errors, checkpoints without env state, bench, and learning CartPole-v1."""

import json
import re
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import jax
import numpy as np
import pytest

import jaxlab
from jaxlab.config import ConfigError, load_config
from jaxlab.config.memory import env_shape
from jaxlab.env import spaces_of
from jaxlab.env.python_envs import EnvStateError, GymnasiumVecEnv, PettingZooVecEnv
from jaxlab.run.loop import train, train_loop
from jaxlab.train.evaluation import play
from jaxlab.train.trainer import Trainer

pettingzoo = pytest.importorskip("pettingzoo")  # in the test extra: CI has it


class Countdown(gym.Env):
    """Observation [t, the action the env received] (float64, cast by the adapter); reward: that
    action; terminates at step ``end``, drawn in [2, 5] at every reset. Registered with a TimeLimit
    of 4 steps, so an episode with end 4 is both terminated and truncated at step 4, one with end 5
    truncated. Discrete(3, start=-1) actions, or Box(-1, 1, (1,)) with continuous=True."""

    observation_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float64)

    def __init__(self, continuous=False):
        self.action_space = (gym.spaces.Box(-1.0, 1.0, (1,), np.float32) if continuous
                             else gym.spaces.Discrete(3, start=-1))

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t, self.end = 0, int(self.np_random.integers(2, 6))
        return np.array([0.0, 0.0]), {}

    def step(self, action):
        self.t += 1
        received = float(np.asarray(action).reshape(-1)[0])
        return np.array([self.t, received]), received, self.t == self.end, False, {}


COUNTDOWN = "JaxlabTest/Countdown-v0"
if COUNTDOWN not in gym.registry:
    gym.register(COUNTDOWN, entry_point=Countdown, max_episode_steps=4, disable_env_checker=True)


class Misbatched(gym.vector.VectorWrapper):
    """A vector env whose batches do not fit, as ``broken`` says: its reset returns env 0's observation
    alone ("observations"), its step one reward for all ("rewards") or final observations of one number
    ("final"), or it declares uint8 observations and returns floats ("pixels")."""

    def __init__(self, env, broken):
        super().__init__(env)
        self.broken = broken
        if broken == "pixels":
            self.single_observation_space = gym.spaces.Box(0, 255, (2,), np.uint8)

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        return (obs[0] if self.broken == "observations" else obs), info

    def step(self, actions):
        obs, rewards, terminated, truncated, info = self.env.step(actions)
        if self.broken == "final" and "final_obs" in info:
            info["final_obs"] = np.array([o if o is None else o[:1] for o in info["final_obs"]], object)
        return obs, (rewards[0] if self.broken == "rewards" else rewards), terminated, truncated, info


def own_vector_env(num_envs, autoreset_mode="SAME_STEP", broken=None):
    """A vector env of the user's own (registered with only a vector_entry_point): here ``num_envs``
    Countdown envs in a SyncVectorEnv that autoresets in ``autoreset_mode``, Misbatched if ``broken``."""
    mode = gym.vector.AutoresetMode[autoreset_mode]
    env = gym.vector.SyncVectorEnv([lambda: gym.make(COUNTDOWN)] * num_envs, autoreset_mode=mode)
    return Misbatched(env, broken) if broken else env


OWN_VECTOR = "JaxlabTest/OwnVector-v0"
if OWN_VECTOR not in gym.registry:
    gym.register(OWN_VECTOR, vector_entry_point=own_vector_env)


def reference_steps(env_id, num_envs, seed, actions, **kwargs):
    """Steps ``num_envs`` single Gymnasium envs by hand (env i reset with seed + i, then reset without
    a seed when its episode ends, in the same step): per step the observations, rewards, raw
    terminated and truncated flags, and {env: final observation}."""
    envs = [gym.make(env_id, **kwargs) for _ in range(num_envs)]
    obs = [env.reset(seed=seed + i)[0] for i, env in enumerate(envs)]
    steps = []
    for step_actions in actions:
        out = {"obs": [], "rewards": [], "terminated": [], "truncated": [], "final": {}}
        for i, env in enumerate(envs):
            o, r, te, tr, _ = env.step(step_actions[i])
            if te or tr:
                out["final"][i] = o
                o, _ = env.reset()
            for key, value in zip(("obs", "rewards", "terminated", "truncated"), (o, r, te, tr)):
                out[key].append(value)
        steps.append({k: (v if k == "final" else np.array(v)) for k, v in out.items()})
    return np.array(obs), steps


@pytest.mark.parametrize("env_id", ["CartPole-v1", COUNTDOWN, OWN_VECTOR])
def test_gymnasium_steps_like_its_envs_stepped_by_hand(env_id):
    """Observations, rewards, flags and final observations equal single Gymnasium envs stepped by hand
    with the same seeds and actions; terminated and truncated together (TimeLimit) is a terminal. A
    vector env of one's own (OWN_VECTOR, of Countdowns: only a vector_entry_point, which make_vec's
    sync mode cannot make) is stepped as it is."""
    num_envs, steps = 5, 120
    env = jaxlab.make(f"gymnasium:{env_id}", num_envs=num_envs, seed=7)
    rng = np.random.default_rng(0)
    actions = [env.action_space.sample(rng, num_envs) for _ in range(steps)]
    single = COUNTDOWN if env_id == OWN_VECTOR else env_id
    shift = -1 if single == COUNTDOWN else 0  # Discrete(3, start=-1): jaxlab's action 0 is the env's -1
    first, reference = reference_steps(single, num_envs, 7, [a + shift for a in actions])
    both = 0
    with env:
        np.testing.assert_array_equal(env.reset(), first.astype(np.float32))
        for t, (step_actions, ref) in enumerate(zip(actions, reference)):
            obs, rewards, terminals, truncations, info = env.step(step_actions)
            np.testing.assert_array_equal(obs, ref["obs"].astype(np.float32), err_msg=f"step {t}")
            np.testing.assert_array_equal(rewards, ref["rewards"].astype(np.float32))
            np.testing.assert_array_equal(terminals, ref["terminated"])
            np.testing.assert_array_equal(truncations, ref["truncated"] & ~ref["terminated"])
            assert not (terminals & truncations).any()
            both += int((ref["terminated"] & ref["truncated"]).sum())
            assert sorted(ref["final"]) == list(np.flatnonzero(terminals | truncations))
            for i, final in ref["final"].items():
                np.testing.assert_array_equal(env.final_observations[i], final.astype(np.float32))
            assert bool(info) == bool(ref["final"])
    if single == COUNTDOWN:
        assert both > 0  # the both-flags step was seen, and reported as a terminal


def test_a_vector_env_of_ones_own_that_does_not_reset_in_the_same_step_is_refused():
    with pytest.raises(ValueError, match=re.escape(
            f"env 'gymnasium:{OWN_VECTOR}': the vector env autoresets in mode AutoresetMode.NEXT_STEP, jaxlab needs "
            "SAME_STEP (a VectorEnv of your own: reset the envs whose episode ends inside step(), put their last "
            "observations in info['final_obs'] and info['_final_obs'], and declare metadata = {'autoreset_mode': "
            "gymnasium.vector.AutoresetMode.SAME_STEP})")):
        jaxlab.make(f"gymnasium:{OWN_VECTOR}", autoreset_mode="NEXT_STEP")


@pytest.mark.parametrize("broken, what", [
    ("observations", "reset() returned observations of shape (2,) and dtype float64; jaxlab needs one observation "
                     "per env, shape (3, 2) (3 x the shape of its single_observation_space Box(-inf, inf, (2,), "
                     "float64)), of a dtype that casts to float32"),
    ("rewards", "step() returned rewards of shape () and dtype float64; jaxlab needs one number per env, shape (3,)"),
    ("pixels", "reset() returned observations of shape (3, 2) and dtype float64; jaxlab needs one observation per "
               "env, shape (3, 2) (3 x the shape of its single_observation_space Box(0, 255, (2,), uint8)), of a "
               "dtype that casts to uint8"),
    ("final", "step() returned info['final_obs'] rows of shape (1,) and dtype float64; jaxlab needs the shape (2,) "
              "of its single_observation_space Box(-inf, inf, (2,), float64), of a dtype that casts to float32")])
def test_a_vector_env_of_ones_own_whose_batches_do_not_fit_is_refused(broken, what):
    """One env's observation or one reward was broadcast over every row, floats cut into a uint8 Box's
    buffer (0.5 to 0): training on garbage with exit 0. A SyncVectorEnv's arrays always fit; a
    VectorEnv of one's own is checked."""
    with jaxlab.make(f"gymnasium:{OWN_VECTOR}", num_envs=3, broken=broken) as env:
        with pytest.raises(ValueError, match=re.escape(f"env 'gymnasium:{OWN_VECTOR}': its vector env's {what}")):
            env.reset()
            for _ in range(5):  # Countdown's episodes end within 4 steps
                env.step(np.zeros(3, np.int32))


def test_gymnasium_statistics_are_per_episode_sums_of_rewards_and_steps():
    """Countdown's return is the sum of the actions the env received, its length the steps: computed
    here from the observations, they match the info means and the tracked per-env sums."""
    with jaxlab.make(f"gymnasium:{COUNTDOWN}", num_envs=4, seed=3) as env:
        env.track_episodes()
        env.reset()
        rng = np.random.default_rng(1)
        running = np.zeros(4)
        ended_returns, ended_lengths = [], []
        for _ in range(60):
            _, rewards, terminals, truncations, info = env.step(env.action_space.sample(rng, 4))
            running += rewards
            ended = terminals | truncations
            returns, lengths = running[ended], env.final_observations[ended, 0]
            if ended.any():
                assert info["episodes"] == ended.sum()
                assert info["episode_return"] == pytest.approx(returns.mean())
                assert info["episode_length"] == pytest.approx(lengths.mean())
                np.testing.assert_array_equal(env.episode_ends, ended.astype(np.int32))
                np.testing.assert_allclose(env.episode_stats[ended], np.stack([returns, lengths], 1))
                ended_returns += list(returns)
                ended_lengths += list(lengths)
            else:
                assert info == {} and not env.episode_ends.any()
            running[ended] = 0
        assert set(ended_lengths) == {2, 3, 4}  # end 5 is cut at 4 by the TimeLimit


def test_gymnasium_spaces_seeds_and_continuous_actions():
    spaces = spaces_of("gymnasium:CartPole-v1")
    c_spaces = spaces_of("cartpole")
    assert (spaces.agents_per_env, spaces.action_space, spaces.has_mask) == (1, c_spaces.action_space, False)
    assert spaces.observation_space.shape == (4,) and spaces.observation_space.dtype == np.float32
    with jaxlab.make("gymnasium:CartPole-v1", num_envs=3, seed=5) as a, \
            jaxlab.make("gymnasium:CartPole-v1", num_envs=3, seed=5) as b:
        np.testing.assert_array_equal(a.reset(), b.reset())
        first = a.observations.copy()
        a.step(np.ones(3, np.int32))
        np.testing.assert_array_equal(a.reset(seed=5), first)            # reseeded: the same starts
        assert not np.array_equal(a.reset(), first)                      # None: the stream goes on
        np.testing.assert_array_equal(a.reset(seed=np.int64(5)), first)  # a numpy integer seeds as an int
    with jaxlab.make(f"gymnasium:{COUNTDOWN}", num_envs=2, continuous=True) as env:
        assert str(env.action_space) == "Box(-1, 1, (1,), float32)"
        env.reset()
        env.step(np.array([[5.0], [-0.25]], np.float32))
        np.testing.assert_array_equal(env.observations[:, 1], [1.0, -0.25])  # clipped as the C envs clip
        with pytest.raises(ValueError, match="agent 1 has a NaN action"):
            env.step(np.array([[0.0], [np.nan]], np.float32))
    with jaxlab.make("gymnasium:CartPole-v1", max_episode_steps=3) as env:   # keyword arguments pass through
        env.reset()
        flags = [env.step(np.zeros(1, np.int32))[3][0] for _ in range(3)]
        assert flags == [False, False, True]


def test_gymnasium_errors_name_the_value_and_a_fix():
    with pytest.raises(ValueError, match=r"unknown Gymnasium env 'CartPol-v1'.*Did you mean.*; an env of your own is "
                                         r"gymnasium:MODULE:ID, which imports MODULE \(on PYTHONPATH\) to register ID; "
                                         r"list the ids with .*pprint_registry"):
        jaxlab.make("gymnasium:CartPol-v1")
    with pytest.raises(ValueError, match="names no env after 'gymnasium:'; write e.g. 'gymnasium:CartPole-v1'"):
        jaxlab.make("gymnasium:")
    with pytest.raises(ValueError, match="library='x.so' names a C env library.*leave library"):
        jaxlab.make("gymnasium:CartPole-v1", library="x.so")
    with pytest.raises(ValueError, match="observation space Discrete.*FlattenObservation"):
        jaxlab.make("gymnasium:FrozenLake-v1")
    with pytest.raises(ValueError, match="num_envs=0 must be an integer >= 1"):
        jaxlab.make("gymnasium:CartPole-v1", num_envs=0)
    with jaxlab.make("gymnasium:CartPole-v1", num_envs=2) as env:
        with pytest.raises(RuntimeError, match="stepped before any reset.*call reset"):
            env.step(np.zeros(2, np.int32))
        env.reset()
        with pytest.raises(ValueError, match=r"agent 1 has action 2, out of range for Discrete\(2\): it must be in \[0, 1\]"):
            env.step(np.array([0, 2], np.int32))
        with pytest.raises(TypeError, match="must have dtype int32, got float64; convert with"):
            env.step(np.zeros(2))
        with pytest.raises(ValueError, match=r"must have shape \(2,\) \(2 agents\), got \(3,\)"):
            env.step(np.zeros(3, np.int32))
        assert env.render() is None
    with pytest.raises(RuntimeError, match="is closed; create a new one with jaxlab.make"):
        env.step(np.zeros(2, np.int32))


class Misfit(gym.Env):
    """Declares Box(-1, 1, (3,)) (float32, or uint8 with u8=True) and returns ``obs`` at reset and step,
    and ``reward``."""

    action_space = gym.spaces.Discrete(2)

    def __init__(self, obs=(0.0, 0.0, 0.0), reward=1.0, u8=False):
        self.observation_space = gym.spaces.Box(0 if u8 else -1, 1, (3,), np.uint8 if u8 else np.float32)
        self.obs, self.reward = np.asarray(obs), reward

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        return self.obs, {}

    def step(self, action):
        if isinstance(self.reward, str):
            raise ValueError("the env's own error")
        return self.obs, self.reward, False, False, {}


MISFIT = "JaxlabTest/Misfit-v0"
if MISFIT not in gym.registry:
    gym.register(MISFIT, entry_point=Misfit, disable_env_checker=True)


@pytest.mark.parametrize("kwargs, call, numpy_says", [
    ({"obs": [0.0, 0.0, 0.0, 0.0]}, "reset", "Output array is the wrong shape"),
    ({"obs": 0.5}, "reset", "Output array has wrong dimensionality"),
    ({"obs": [300.0, -1.0, 2.7], "u8": True}, "reset", "Cannot cast array data from dtype\\('float64'\\) to dtype\\('uint8'\\)"),
    ({"reward": np.array([1.0, 2.0])}, "step", "setting an array element with a sequence")])
def test_gymnasium_returns_that_do_not_fit_the_declared_space_name_the_env(kwargs, call, numpy_says):
    """Gymnasium's vector env raises numpy's errors; the adapter's name the env and its declared space.
    The env's own errors pass unchanged."""
    with jaxlab.make(f"gymnasium:{MISFIT}", num_envs=2, **kwargs) as env:
        space = re.escape(str(env._vec.single_observation_space))
        message = (f"env 'gymnasium:{MISFIT}': its {call}\\(\\) returned values that do not fit its declared "
                   f"observation_space {space}.*{numpy_says}.*make the env return observations of shape \\(3,\\)")
        with pytest.raises(ValueError, match=message):
            env.reset()
            env.step(np.zeros(2, np.int32))
    if call == "reset":  # found before any training: spaces_of (env_shape) resets the env it makes
        with pytest.raises(ValueError, match=message):
            spaces_of(f"gymnasium:{MISFIT}", **kwargs)
    with jaxlab.make(f"gymnasium:{MISFIT}", num_envs=2, reward="raise") as env:
        env.reset()
        with pytest.raises(ValueError, match="^the env's own error$"):
            env.step(np.zeros(2, np.int32))


@pytest.mark.parametrize("name, reward, shown", [
    (f"gymnasium:{MISFIT}", None, "nan"), (f"gymnasium:{MISFIT}", np.nan, "nan"),
    (f"gymnasium:{MISFIT}", -np.inf, "-inf"), ("pettingzoo:misfit_env", np.nan, "nan")])
def test_a_reward_that_is_not_a_finite_number_is_refused(tmp_path, monkeypatch, name, reward, shown):
    """A Gymnasium env's reward of None (which its vector env stores as nan), NaN or infinity, and a
    PettingZoo env's NaN, went into the rewards with no error: every return, advantage and loss of the
    batch became NaN."""
    (tmp_path / "misfit_env.py").write_text(MISFIT_PZ)
    monkeypatch.syspath_prepend(str(tmp_path))
    agent = " agent 'a'" if name.startswith("pettingzoo") else ""
    if name.startswith("gymnasium"):
        shown += re.escape(" (or None, which Gymnasium's vector env stores as nan)")
    message = (re.escape(f"env '{name}' #0{agent} at step 0: its step() returned the reward ") + shown
               + re.escape("; a reward must be a finite number (0.0 when it earned none)"))
    with jaxlab.make(name, num_envs=2, reward=reward) as env:
        env.reset()
        with pytest.raises(ValueError, match=message):
            env.step(np.zeros(env.num_agents, np.int32))
    sys.modules.pop("misfit_env", None)


REGISTERS = '''
"""Registers JaxlabTest/FromModule-v0: CartPole-v1 with 7 steps an episode."""
import gymnasium

if "JaxlabTest/FromModule-v0" not in gymnasium.registry:
    gymnasium.register("JaxlabTest/FromModule-v0", entry_point="gymnasium.envs.classic_control:CartPoleEnv",
                       max_episode_steps=7)
'''


def test_a_gymnasium_module_id_imports_its_module_first(tmp_path, monkeypatch):
    """gymnasium:MODULE:ID (as gymnasium.make takes it) imports MODULE, which registers ID; gym.spec alone
    did not, and the id was refused as unknown. A module that cannot be imported is named with the fix."""
    (tmp_path / "jaxlab_registers.py").write_text(REGISTERS)
    (tmp_path / "jaxlab_registers_badly.py").write_text("raise RuntimeError('no licence')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    name = "gymnasium:jaxlab_registers:JaxlabTest/FromModule-v0"
    try:
        assert load_config(name)[0].env_name == name
        with jaxlab.make(name, num_envs=2) as env:
            env.reset()
            flags = [env.step(np.zeros(2, np.int32))[3].all() for _ in range(7)]
        assert flags == [False] * 6 + [True]  # its registered TimeLimit of 7 steps
        with pytest.raises(ConfigError, match="unknown Gymnasium env 'jaxlab_registers:Nope-v0'.*module "
                                              "jaxlab_registers registers no such id"):
            load_config("gymnasium:jaxlab_registers:Nope-v0")
    finally:
        sys.modules.pop("jaxlab_registers", None)
        gym.registry.pop("JaxlabTest/FromModule-v0", None)
    with pytest.raises(ConfigError, match="env 'gymnasium:jaxlab_no_such_module:X-v0': no module named "
                                          "'jaxlab_no_such_module'; the module that registers the env must be "
                                          "importable: put the directory that holds it on PYTHONPATH"):
        load_config("gymnasium:jaxlab_no_such_module:X-v0")
    with pytest.raises(ValueError, match="importing jaxlab_registers_badly, the module that registers the env, "
                                         "failed: RuntimeError: no licence; fix the module"):
        jaxlab.make("gymnasium:jaxlab_registers_badly:X-v0")


class Blocker:
    """A meta-path finder that makes ``package`` look not installed."""

    def __init__(self, package):
        self.package = package

    def find_spec(self, fullname, path=None, target=None):
        if fullname == self.package or fullname.startswith(self.package + "."):
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=self.package)
        return None


def test_install_hints_name_an_extra_of_this_checkout():
    """The hints said pip install 'jaxlab[EXTRA]', which PyPI answers with nothing (jaxlab is installed from its
    checkout); each extra a message names is now installed from the checkout jaxlab runs from."""
    import tomllib

    from jaxlab.messages import install_extra

    checkout = Path(jaxlab.__file__).resolve().parents[1]
    extras = tomllib.loads((checkout / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for extra in ("gymnasium", "pettingzoo", "plot", "gif", "sweep", "wandb", "cuda12"):
        assert extra in extras and install_extra(extra) == f'pip install -e "{checkout}[{extra}]"'


@pytest.mark.parametrize("package, name", [("gymnasium", "gymnasium:CartPole-v1"),
                                           ("pettingzoo", "pettingzoo:pettingzoo.butterfly.pistonball_v6")])
def test_a_missing_package_says_what_to_install(monkeypatch, package, name):
    for module in [m for m in sys.modules if m == package or m.startswith(package + ".")]:
        monkeypatch.delitem(sys.modules, module)
    monkeypatch.setattr(sys, "meta_path", [Blocker(package), *sys.meta_path])
    checkout = Path(jaxlab.__file__).resolve().parents[1]  # not on PyPI: pip install 'jaxlab[X]' finds nothing
    fix = re.escape(f'needs the {package} package, which is not installed; install it with pip install -e '
                    f'"{checkout}[{package}]"')
    with pytest.raises(ImportError, match=fix):
        jaxlab.make(name)
    with pytest.raises(ConfigError, match=fix):
        load_config(name)


def test_python_envs_take_cartpoles_defaults_and_no_env_parameters():
    config, sources = load_config("gymnasium:CartPole-v1")
    assert sources["train.total_timesteps"] == "configs/envs/cartpole.toml"
    assert config.train.total_timesteps == load_config("cartpole")[0].train.total_timesteps
    assert load_config("pettingzoo:pettingzoo.butterfly.pistonball_v6")[0].env == {}
    with pytest.raises(ConfigError, match=r"unknown config key 'env.max_steps': 'gymnasium:CartPole-v1' is a Python env, "
                                          r"which takes no env parameters from flags or config files \(\[env\] keys: "
                                          r"library, mask_check\); pass .* to jaxlab.make\('gymnasium:CartPole-v1', ...\) "
                                          r"in Python, or, to train from the command line, register an id .* and train "
                                          r"gymnasium:MODULE:MyEnv-v0$"):
        load_config("gymnasium:CartPole-v1", flags=["--env.max-steps", "10"])
    with pytest.raises(ConfigError, match=r"'env.max_steps': 'pettingzoo:pettingzoo.butterfly.pistonball_v6' is a Python "
                                          r"env.*write a module of yours whose parallel_env\(\) passes them on"):
        load_config("pettingzoo:pettingzoo.butterfly.pistonball_v6", flags=["--env.max-steps", "10"])
    with pytest.raises(ConfigError, match="unknown config key 'env.mask_chek'; did you mean 'env.mask_check'"):
        load_config("gymnasium:CartPole-v1", flags=["--env.mask-chek", "off"])
    with pytest.raises(ConfigError, match="is a Python env and takes none: remove env.library"):
        load_config("gymnasium:CartPole-v1", flags=["--env.library", "x.so"])
    with pytest.raises(ConfigError, match="unknown Gymnasium env 'Nope-v0'"):
        load_config("gymnasium:Nope-v0")


# ---- PettingZoo: a tiny parallel env of the test's own, in a module of its own ----

RELAY = '''
"""Three agents whose episodes end at different, known steps: a0 terminates at step 2, a1 is
truncated at step 3, a2 terminates at step 4 (then the env is over and resets). Observation of agent
j: [j, t, draw] with draw a number from the env's RNG at reset; reward: action + 10 j. The action mask
(in the observation, a Dict) forbids action 2 to a1."""
import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv

ENDS = {"a0": (2, "term"), "a1": (3, "trunc"), "a2": (4, "term")}


class Relay(ParallelEnv):
    metadata = {"name": "relay_v0"}

    def __init__(self, masked=True):
        self.possible_agents = ["a0", "a1", "a2"]
        self.masked = masked
        self.rng = np.random.default_rng()

    def observation_space(self, agent):
        box = spaces.Box(-np.inf, np.inf, (3,), np.float64)
        return spaces.Dict({"observation": box, "action_mask": spaces.MultiBinary(3)}) if self.masked else box

    def action_space(self, agent):
        return spaces.Discrete(3)

    def _obs(self, agent):
        o = np.array([self.possible_agents.index(agent), self.t, self.draw], np.float64)
        if not self.masked:
            return o
        return {"observation": o, "action_mask": np.array([1, 1, agent != "a1"], np.int8)}

    def reset(self, seed=None, options=None):
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.draw, self.t = float(self.rng.integers(1000)), 0
        self.agents = list(self.possible_agents)
        return {a: self._obs(a) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions):
        self.t += 1
        obs, rew, term, trunc, info = {}, {}, {}, {}, {}
        for agent, action in actions.items():
            end, how = ENDS[agent]
            obs[agent], info[agent] = self._obs(agent), {}
            rew[agent] = float(action) + 10 * self.possible_agents.index(agent)
            term[agent] = self.t == end and how == "term"
            trunc[agent] = self.t == end and how == "trunc"
        self.agents = [a for a in self.agents if not (term[a] or trunc[a])]
        return obs, rew, term, trunc, info


parallel_env = Relay
'''


@pytest.fixture
def relay(tmp_path, monkeypatch):
    """The name of the Relay env: a user's own module on the path."""
    (tmp_path / "relay_env.py").write_text(RELAY)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "pettingzoo:relay_env"
    sys.modules.pop("relay_env", None)


def test_pettingzoo_per_agent_ends_by_value(relay):
    """Layout (row = env * 3 + agent), per-agent flags, final observations, waiting rows (reward 0,
    terminal 1, active 0, an all-True mask), the env's reset when its last agent ends, statistics per
    agent-episode, and each env seeded with seed + env."""
    with jaxlab.make(relay, num_envs=2, seed=11) as env:
        assert (env.agents_per_env, env.num_agents, env.kind.has("agents_wait"), env.kind.has("mask")) == (3, 6, True, True)
        draws = [float(np.random.default_rng(11 + e).integers(1000)) for e in range(2)]
        obs = env.reset()
        np.testing.assert_array_equal(obs, [[j, 0, draws[e]] for e in range(2) for j in range(3)])
        np.testing.assert_array_equal(env.action_mask, [[1, 1, 0 if j == 1 else 1] for _ in range(2) for j in range(3)])
        env.track_episodes()
        ones = np.ones(6, np.int32)
        seen = []
        for t in range(1, 6):
            _, rewards, terminals, truncations, info = env.step(ones)
            seen.append((rewards.copy(), terminals.copy(), truncations.copy(), env.active.copy(), info,
                         env.episode_ends.copy(), env.episode_stats.copy(), env.observations.copy(),
                         env.final_observations.copy(), env.action_mask.copy()))
        per_env = lambda row: np.tile(row, 2)  # noqa: E731  both envs do the same
        # step 1: everyone acts
        r, te, tr, active, info, *_ = seen[0]
        np.testing.assert_array_equal(r, per_env([1, 11, 21]))
        assert not te.any() and not tr.any() and active.all() and info == {}
        # step 2: a0 terminates (its final observation kept), then waits
        r, te, tr, active, info, ends, stats, _, final, _ = seen[1]
        np.testing.assert_array_equal(te, per_env([1, 0, 0]))
        np.testing.assert_array_equal(active, per_env([0, 1, 1]))
        np.testing.assert_array_equal(final[[0, 3]], [[0, 2, draws[0]], [0, 2, draws[1]]])
        assert info == {"episodes": 2, "episode_return": 2.0, "episode_length": 2.0}
        np.testing.assert_array_equal(ends, [1, 1])
        np.testing.assert_array_equal(stats, [[2, 2], [2, 2]])
        # step 3: a0 waits (reward 0, terminal 1, mask all True), a1 is truncated
        r, te, tr, active, info, ends, stats, _, final, mask = seen[2]
        np.testing.assert_array_equal(r, per_env([0, 11, 21]))
        np.testing.assert_array_equal(te, per_env([1, 0, 0]))
        np.testing.assert_array_equal(tr, per_env([0, 1, 0]))
        np.testing.assert_array_equal(active, per_env([0, 0, 1]))
        np.testing.assert_array_equal(mask[[0, 3]], np.ones((2, 3), bool))
        np.testing.assert_array_equal(final[[1, 4]], [[1, 3, draws[0]], [1, 3, draws[1]]])
        assert info == {"episodes": 2, "episode_return": 33.0, "episode_length": 3.0}
        # step 4: a2 terminates, the env resets in the same step: new episode, everyone active again
        r, te, tr, active, info, ends, stats, obs, final, _ = seen[3]
        np.testing.assert_array_equal(te, per_env([1, 1, 1]))
        assert not tr.any() and active.all()
        np.testing.assert_array_equal(final[[2, 5]], [[2, 4, draws[0]], [2, 4, draws[1]]])
        np.testing.assert_array_equal(obs[:, :2], [[j, 0] for _ in range(2) for j in range(3)])
        assert info == {"episodes": 2, "episode_return": 84.0, "episode_length": 4.0}  # waiting rows don't count
        np.testing.assert_array_equal(stats, [[84, 4], [84, 4]])
        # step 5: the new episode runs
        r, te, tr, active, info, *_ = seen[4]
        np.testing.assert_array_equal(r, per_env([1, 11, 21]))
        assert not te.any() and info == {}


def test_pettingzoo_masks_are_strict(relay):
    with jaxlab.make(relay, num_envs=2) as env:
        env.reset()
        actions = np.zeros(6, np.int32)
        actions[4] = 2  # env 1's a1 may not take action 2
        with pytest.raises(ValueError, match=r"env 'pettingzoo:relay_env' #1 agent 1 \(row 4\) at step 0: action 2 "
                                             r"is not legal under its mask; legal: 0, 1"):
            env.step(actions)
        env.action_mask[0] = False
        with pytest.raises(ValueError, match=r"#0 agent 0 \(row 0\) at step 0: its action mask allows no action"):
            env.step(np.zeros(6, np.int32))
    with jaxlab.make(relay, num_envs=2, mask_check="off") as env:
        env.reset()
        _, rewards, *_ = env.step(actions)
        assert rewards[4] == 12.0
    with jaxlab.make(relay, masked=False) as env:  # keyword arguments go to parallel_env
        assert env.action_mask is None and env.observation_space.shape == (3,)


def test_pettingzoo_errors_name_the_module_and_a_fix(relay, tmp_path):
    with pytest.raises(ValueError, match="no module named 'no_such_module'; check the module path"):
        jaxlab.make("pettingzoo:no_such_module.envs")
    with pytest.raises(ValueError, match="module json has no parallel_env\\(\\); pettingzoo:MODULE needs"):
        jaxlab.make("pettingzoo:json")
    (tmp_path / "needs_dep.py").write_text("import jaxlab_missing_dependency\n")
    with pytest.raises(ImportError, match="importing needs_dep failed: No module named 'jaxlab_missing_dependency'"):
        jaxlab.make("pettingzoo:needs_dep")
    with jaxlab.make(relay) as env:
        for call in (env.save_state, env.state_shapes, lambda: env.load_state({})):
            with pytest.raises(EnvStateError, match="cannot save or load the state of the Python env "
                                                    "'pettingzoo:relay_env'.*resumed run starts new episodes"):
                call()


MISFIT_PZ = '''
"""Two agents declaring Box(-1, 1, (3,)) observations and Discrete(2) actions (with a mask in the
observation Dict when masked=True) that return ``obs``, ``mask`` and ``reward`` as given."""
import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv


class Misfit(ParallelEnv):
    metadata = {"name": "misfit_v0"}

    def __init__(self, obs=(0.0, 0.0, 0.0), mask=(1, 1), reward=1.0, masked=False, pixels=False):
        self.possible_agents = ["a", "b"]
        self.obs, self.mask, self.reward, self.masked = np.asarray(obs, np.float32), np.asarray(mask, np.int8), reward, masked
        self.pixels = pixels  # declare Box(0, 255, (3,), uint8) (and still return float32 obs)

    def observation_space(self, agent):
        box = spaces.Box(0, 255, (3,), np.uint8) if self.pixels else spaces.Box(-1, 1, (3,), np.float32)
        return spaces.Dict({"observation": box, "action_mask": spaces.MultiBinary(2)}) if self.masked else box

    def action_space(self, agent):
        return spaces.Discrete(2)

    def _obs(self):
        return {"observation": self.obs, "action_mask": self.mask} if self.masked else self.obs

    def reset(self, seed=None, options=None):
        self.agents = list(self.possible_agents)
        return {a: self._obs() for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions):
        return ({a: self._obs() for a in actions}, {a: self.reward for a in actions},
                {a: False for a in actions}, {a: False for a in actions}, {a: {} for a in actions})


parallel_env = Misfit
'''


@pytest.mark.parametrize("kwargs, what", [
    ({"obs": 0.25}, r"its observation array\(0.25, dtype=float32\) has shape \(\), not the shape of its declared observation space "
                    r"Box\(-1.0, 1.0, \(3,\), float32\); make the env return observations of that shape"),
    ({"obs": [0.7]}, r"its observation array\(\[0.7\], dtype=float32\) has shape \(1,\), not the shape"),
    ({"obs": [0.0] * 5}, r"its observation array\(\[0., 0., 0., 0., 0.\], dtype=float32\) has shape \(5,\), not the shape of its declared observation space"),
    ({"masked": True, "mask": [1, 0, 1]}, r"its observation's 'action_mask' array\(\[1, 0, 1\], dtype=int8\) has shape "
                                          r"\(3,\); its action space Discrete\(2\) needs a mask of shape \(2,\)"),
    ({"reward": np.array([1.0, 2.0])}, r"its reward array\(\[1., 2.\]\) has shape \(2,\); a ParallelEnv's "
                                       "reward is one number per agent"),
    ({"reward": None}, "its reward None is not a number; a ParallelEnv's reward is one number per agent"),
    ({"reward": "1"}, "its reward '1' is not a number"),
    ({"pixels": True, "obs": [0.5, 1.0, 0.25]},
     r"its observation array\(\[0.5 , 1. , 0.25\], dtype=float32\) has dtype float32, which the dtype uint8 of its "
     r"declared observation space Box\(0, 255, \(3,\), uint8\) cannot hold \(a cast would cut 0.5 to 0\); make the "
     "env return uint8 observations")])
def test_pettingzoo_returns_that_do_not_fit_the_declared_spaces_are_refused(tmp_path, monkeypatch, kwargs, what):
    """A scalar or 1-element observation was broadcast over the row (training on garbage); a longer one,
    a mask of the wrong width and an array reward gave numpy's errors, naming no env; float observations
    of a uint8 Box were cut to whole numbers (0.5 to 0: the policy saw zeros)."""
    (tmp_path / "misfit_env.py").write_text(MISFIT_PZ)
    monkeypatch.syspath_prepend(str(tmp_path))
    message = "env 'pettingzoo:misfit_env' #0 agent 'a' at step 0: " + what
    with jaxlab.make("pettingzoo:misfit_env", num_envs=2, **kwargs) as env:
        with pytest.raises(ValueError, match=message):
            env.reset()
            env.step(np.zeros(4, np.int32))
    if "reward" not in kwargs:  # found before any training: spaces_of (env_shape) resets the env it makes
        with pytest.raises(ValueError, match=message):
            spaces_of("pettingzoo:misfit_env", **kwargs)
    sys.modules.pop("misfit_env", None)


ONE_BAD_PZ = MISFIT_PZ + '''
made = []


class OneBad(Misfit):
    """Observations of the declared space, but agent b of the second env made returns ``bad`` at its 3rd step."""

    def __init__(self, pixels=False, bad=(0.0, 0.0)):
        super().__init__(pixels=pixels)
        self.obs, self.bad = np.zeros(3, np.uint8 if pixels else np.float32), np.asarray(bad, np.float32)
        self.index, self.steps = len(made), 0
        made.append(self)

    def step(self, actions):
        returned = super().step(actions)
        self.steps += 1
        if self.index == 1 and self.steps == 3:
            returned[0]["b"] = self.bad
        return returned


parallel_env = OneBad
'''


@pytest.mark.parametrize("kwargs, what", [
    ({}, r"its observation array\(\[0., 0.\], dtype=float32\) has shape \(2,\), not the shape of its declared "
         r"observation space Box\(-1.0, 1.0, \(3,\), float32\)"),
    ({"pixels": True, "bad": [0.5, 1.0, 0.25]},
     r"its observation array\(\[0.5 , 1. , 0.25\], dtype=float32\) has dtype float32, which the dtype uint8 of its "
     r"declared observation space Box\(0, 255, \(3,\), uint8\) cannot hold")])
def test_pettingzoo_observations_are_checked_as_one_batch_that_names_the_agent_that_misfits(tmp_path, monkeypatch,
                                                                                             kwargs, what):
    """Every agent's observation was checked on its own in Python (its shape, then np.asarray for its dtype)
    in every step. The step's observations are now checked as one stacked array; only a stack that does not
    fit is looked at row by row, to name the one agent (of one env, at one step) that returned the misfit."""
    (tmp_path / "one_bad_env.py").write_text(ONE_BAD_PZ)
    monkeypatch.syspath_prepend(str(tmp_path))
    rows_checked = []
    check = PettingZooVecEnv._check_observation

    def counted(self, row, observation):
        rows_checked.append(row)
        return check(self, row, observation)

    monkeypatch.setattr(PettingZooVecEnv, "_check_observation", counted)
    try:
        with jaxlab.make("pettingzoo:one_bad_env", num_envs=3, **kwargs) as env:
            env.reset()
            for _ in range(2):
                env.step(np.zeros(6, np.int32))
            assert rows_checked == []  # the stacks fit: no row by row
            with pytest.raises(ValueError, match="env 'pettingzoo:one_bad_env' #1 agent 'b' at step 2: " + what):
                env.step(np.zeros(6, np.int32))
            assert rows_checked[-1] == 3  # env #1's agent b, after the rows that fit
    finally:
        sys.modules.pop("one_bad_env", None)


REUSED_PZ = MISFIT_PZ + '''


class Reused(Misfit):
    """Returns one array of its own as every observation, changed in place: by each step (to 0.1, 0.2, ...), and
    by its reset (to -1), which follows the step that ends the episode (the second)."""

    def reset(self, seed=None, options=None):
        self.agents, self.steps = list(self.possible_agents), 0
        self.obs[:] = -1
        return {a: self.obs for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions):
        self.steps += 1
        self.obs[:] = self.steps / 10
        ended = self.steps == 2
        self.agents = [] if ended else self.agents
        return ({a: self.obs for a in actions}, {a: 0.0 for a in actions}, {a: ended for a in actions},
                {a: False for a in actions}, {a: {} for a in actions})


parallel_env = Reused
'''


def test_pettingzoo_final_observations_are_the_steps_when_the_reset_reuses_the_array(tmp_path, monkeypatch):
    """The observations are written once per step, after every env has stepped and the ended ones reset: an
    env whose reset changes the array its step returned in place still gets that step's as the final ones."""
    (tmp_path / "reused_env.py").write_text(REUSED_PZ)
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        with jaxlab.make("pettingzoo:reused_env", num_envs=2) as env:
            env.reset()
            env.step(np.zeros(4, np.int32))
            np.testing.assert_array_equal(env.observations, np.full((4, 3), 0.1, np.float32))
            env.step(np.zeros(4, np.int32))
            assert env.terminals.all()
            np.testing.assert_array_equal(env.final_observations, np.full((4, 3), 0.2, np.float32))
            np.testing.assert_array_equal(env.observations, np.full((4, 3), -1.0, np.float32))
    finally:
        sys.modules.pop("reused_env", None)


class InPlace(gym.Env):
    """Keeps one observation array and returns it after changing it in place: [steps taken]; every
    reset writes 0 into that same array. Registered with a TimeLimit of 3 steps."""

    observation_space = gym.spaces.Box(-np.inf, np.inf, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self):
        self.obs = np.zeros(1, np.float32)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.obs[0] = 0.0
        return self.obs, {}

    def step(self, action):
        self.obs[0] += 1.0
        return self.obs, 1.0, False, False, {}


IN_PLACE = "JaxlabTest/InPlace-v0"
if IN_PLACE not in gym.registry:
    gym.register(IN_PLACE, entry_point=InPlace, max_episode_steps=3, disable_env_checker=True)


def test_gymnasium_final_observations_are_the_steps_when_the_env_changes_its_array_in_place():
    """The SyncVectorEnv kept the array the env's last step returned as final_obs, and the env's reset then
    wrote 0 into it: the truncated episode's final observation read [0] (the next episode's first), not [3],
    and its value was bootstrapped from that, with no error."""
    with jaxlab.make("gymnasium:" + IN_PLACE, num_envs=2, seed=0) as env:
        env.reset()
        for _ in range(3):
            env.step(np.zeros(2, np.int32))
        np.testing.assert_array_equal(env.truncations, [True, True])
        np.testing.assert_array_equal(env.final_observations, [[3.0], [3.0]])
        np.testing.assert_array_equal(env.observations, [[0.0], [0.0]])


LEGACY_SEEDING_PZ = MISFIT_PZ + '''

seeds = []  # every seed a reset was given


class LegacySeeding(Misfit):
    """Seeds numpy's legacy RandomState, which takes no seed of 2**32 or more, as many envs do."""

    def reset(self, seed=None, options=None):
        if seed is not None:
            seeds.append(seed)
            self.rng = np.random.RandomState(seed)
        return super().reset(seed, options)


parallel_env = LegacySeeding
'''


def test_python_envs_of_every_group_take_seeds_that_numpys_legacy_seeding_takes(tmp_path, monkeypatch):
    """With vec.groups 2, group 1's envs were seeded from a 64-bit hash, and an env seeding
    np.random.RandomState(seed) in its reset stopped jaxlab train with 'failed while being made: ValueError:
    Seed must be between 0 and 2**32 - 1'. The groups' seeds stay distinct."""
    from jaxlab.train.trainer import make_group_envs

    (tmp_path / "legacy_seeding_env.py").write_text(LEGACY_SEEDING_PZ)
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        config = load_config("pettingzoo:legacy_seeding_env", flags=["--vec.num-envs", "4", "--vec.groups", "2"])[0]
        envs = make_group_envs(config, 1)
        for env in envs:
            env.reset()
            env.close()
        import legacy_seeding_env

        seeds = set(legacy_seeding_env.seeds)  # each group's env 0 is also reset once as it is made
        assert len(seeds) == 4 and max(seeds) < 2**32  # 2 groups x 2 envs, each its own seed
    finally:
        sys.modules.pop("legacy_seeding_env", None)


class LegacySeedingGym(gym.Env):
    """A Gymnasium env whose reset seeds numpy's legacy RandomState (seeds below 2**32 only)."""
    observation_space = gym.spaces.Box(-1, 1, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.rng, self.t = np.random.RandomState(seed), 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.t += 1
        return self.rng.uniform(-1, 1, 2).astype(np.float32), 1.0, False, self.t >= 8, {}


if "JaxlabTest/LegacySeeding-v0" not in gym.registry:
    gym.register("JaxlabTest/LegacySeeding-v0", entry_point=LegacySeedingGym)


def test_a_run_seed_that_numpys_legacy_seeding_refuses_is_one_line_with_the_fix(tmp_path, capsys):
    """Group 0's Python envs take train.seed + index as it is: a Gymnasium env seeding np.random.RandomState in
    its reset, with --train.seed 4294967294, stopped jaxlab train with a bare traceback at the first reset
    (ValueError: Seed must be between 0 and 2**32 - 1). It is one error line (exit 2) naming the env, the seed
    and the fix; the env's run trains with a small seed."""
    from jaxlab import cli

    flags = ["train", "gymnasium:JaxlabTest/LegacySeeding-v0", "--vec.num-envs", "4", "--train.bptt-horizon", "8",
             "--train.minibatch-size", "16", "--train.total-timesteps", "64", "--run-dir", str(tmp_path / "run")]
    capsys.readouterr()
    assert cli.main([*flags, "--train.seed", str(2**32 - 2)]) == 2
    err = capsys.readouterr().err
    assert ("error: env 'gymnasium:JaxlabTest/LegacySeeding-v0': its reset(seed=...) failed for seed 4294967294 "
            "(env i takes that seed + i): Seed must be between 0 and 2**32 - 1") in err
    assert "(jaxlab train --train.seed 0, jaxlab eval --seed 0)" in err and "Traceback" not in err
    assert cli.main([*flags, "--train.seed", "5"]) == 0


def test_an_eval_seed_that_numpys_legacy_seeding_refuses_is_one_line_with_the_fix(tmp_path, capsys):
    """jaxlab eval --seed 4294967295 of a Gymnasium env seeding np.random.RandomState in its reset stopped with
    a traceback (the adapter's ValueError naming the env, raised in play, is not the 'cannot create env' eval
    turns into a line): one error line, exit 2."""
    from jaxlab import cli

    name, run = "gymnasium:JaxlabTest/LegacySeeding-v0", str(tmp_path / "run")
    assert cli.main(["train", name, "--vec.num-envs", "4", "--train.bptt-horizon", "8", "--train.minibatch-size",
                     "16", "--train.total-timesteps", "64", "--run-dir", run]) == 0
    capsys.readouterr()
    assert cli.main(["eval", name, "--checkpoint", run, "--episodes", "2", "--seed", str(2**32 - 1)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"jaxlab eval: error: env '{name}': its reset(seed=...) failed for seed 4294967295")
    assert "jaxlab eval --seed 0" in err and "Traceback" not in err


def needs_box2d(**kwargs):
    raise gym.error.DependencyNotInstalled('Box2D is not installed, you can install it by run `pip install swig` '
                                           'followed by `pip install "gymnasium[box2d]"`')


if "JaxlabTest/NeedsBox2D-v0" not in gym.registry:
    gym.register("JaxlabTest/NeedsBox2D-v0", entry_point=needs_box2d)


def test_python_envs_that_fail_while_being_made_are_config_errors(tmp_path, monkeypatch):
    """A module that raises at import, a parallel_env() that raises or returns no ParallelEnv, a
    Gymnasium env missing a dependency: one error naming the env and the error (a ConfigError where
    the config's env is made for its spaces), not a traceback of the env's code."""
    from jaxlab.config import memory

    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "pz_import_fails.py").write_text("raise RuntimeError('module-level failure')\n")
    (tmp_path / "pz_make_fails.py").write_text("def parallel_env(**kwargs):\n    raise RuntimeError('no display')\n")
    (tmp_path / "pz_makes_none.py").write_text("def parallel_env(**kwargs):\n    return None\n")
    try:
        with pytest.raises(ConfigError, match="env 'pettingzoo:pz_import_fails': importing pz_import_fails failed: "
                                              "RuntimeError: module-level failure; fix the module"):
            load_config("pettingzoo:pz_import_fails")
        config = load_config("pettingzoo:pz_make_fails")[0]
        with pytest.raises(ConfigError, match="^env 'pettingzoo:pz_make_fails' failed while being made: "
                                              "RuntimeError: no display$"):
            memory.env_shape(config)
        none = r"env 'pettingzoo:pz_makes_none': pz_makes_none.parallel_env\(\) returned None \(NoneType\), not a PettingZoo ParallelEnv"
        with pytest.raises(ValueError, match=none):
            jaxlab.make("pettingzoo:pz_makes_none")
        with pytest.raises(ConfigError, match=none):
            memory.env_shape(load_config("pettingzoo:pz_makes_none")[0])
    finally:
        for module in ("pz_import_fails", "pz_make_fails", "pz_makes_none"):
            sys.modules.pop(module, None)
    with pytest.raises(ConfigError, match=r"^env 'gymnasium:JaxlabTest/NeedsBox2D-v0' failed while being made: "
                                          r"DependencyNotInstalled: Box2D is not installed, .*pip install \"gymnasium\[box2d\]\"`$"):
        memory.env_shape(load_config("gymnasium:JaxlabTest/NeedsBox2D-v0")[0])


def test_pistonball_steps_like_the_parallel_env_stepped_by_hand():
    """A real PettingZoo env: rows in possible_agents order per env, uint8 observations as the env's,
    every agent truncated at max_cycles with its final observation, and the next episode seeded on."""
    from pettingzoo.butterfly import pistonball_v6

    kwargs = dict(n_pistons=3, max_cycles=6, continuous=False)
    env = jaxlab.make("pettingzoo:pettingzoo.butterfly.pistonball_v6", num_envs=2, seed=4, **kwargs)
    refs = [pistonball_v6.parallel_env(**kwargs) for _ in range(2)]
    rng = np.random.default_rng(0)
    with env:
        assert isinstance(env, PettingZooVecEnv) and env.observations.dtype == np.uint8
        obs = env.reset()
        for e, ref in enumerate(refs):
            ref_obs, _ = ref.reset(seed=4 + e)
            np.testing.assert_array_equal(obs[3 * e:3 * e + 3], [ref_obs[a] for a in ref.possible_agents])
        for t in range(6):
            actions = env.action_space.sample(rng, 6)
            obs, rewards, terminals, truncations, info = env.step(actions)
            for e, ref in enumerate(refs):
                ref_obs, ref_rew, _, ref_trunc, _ = ref.step({a: int(actions[3 * e + j]) for j, a in enumerate(ref.possible_agents)})
                rows = slice(3 * e, 3 * e + 3)
                np.testing.assert_allclose(rewards[rows], [ref_rew[a] for a in ref.possible_agents], rtol=1e-6)
                np.testing.assert_array_equal(truncations[rows], [ref_trunc[a] for a in ref.possible_agents])
                if t == 5:
                    np.testing.assert_array_equal(env.final_observations[rows], [ref_obs[a] for a in ref.possible_agents])
                    ref_obs, _ = ref.reset()
                np.testing.assert_array_equal(obs[rows], [ref_obs[a] for a in ref.possible_agents])
        assert truncations.all() and not terminals.any()
        assert info["episodes"] == 6 and info["episode_length"] == 6.0


@pytest.mark.skipif(not hasattr(pettingzoo, "make"), reason="PettingZoo's registry came in 1.27")
def test_a_pettingzoo_registry_id_makes_the_same_env():
    kwargs = dict(n_pistons=3, max_cycles=6, continuous=False)
    with jaxlab.make("pettingzoo:butterfly/pistonball-v6", num_envs=2, seed=1, **kwargs) as by_id, \
            jaxlab.make("pettingzoo:pettingzoo.butterfly.pistonball_v6", num_envs=2, seed=1, **kwargs) as by_module:
        np.testing.assert_array_equal(by_id.reset(), by_module.reset())
    with pytest.raises(ValueError, match="unknown PettingZoo parallel env 'butterfly/pistonbal-v6'"):
        jaxlab.make("pettingzoo:butterfly/pistonbal-v6")


# ---- training, checkpoints, evaluation, bench ----

SMALL = ["--vec.num-envs", "8", "--train.bptt-horizon", "8", "--train.minibatch-size", "16", "--policy.hidden-size", "16"]


def test_checkpoints_of_a_python_env_hold_no_env_state_and_say_so(tmp_path, capsys):
    config, _ = load_config("gymnasium:CartPole-v1", flags=[*SMALL, "--train.total-timesteps", "384"])
    with Trainer(config) as trainer:
        train_loop(trainer, updates=2)
        trainer.save_checkpoint(tmp_path / "a")
        trainer.save_checkpoint(tmp_path / "b")
        assert "env" not in trainer.checkpoint_state()
        params = trainer.state.params
    err = capsys.readouterr().err
    assert err.count("warning: this checkpoint holds no env state: gymnasium:CartPole-v1 is a Python env") == 1
    assert "resuming from it starts new episodes" in err
    with Trainer(config) as resumed:
        meta = resumed.load_checkpoint(tmp_path / "b")
        assert meta["update"] == 2 and resumed.global_step == 128
        for saved, loaded in zip(jax.tree.leaves(params), jax.tree.leaves(resumed.state.params), strict=True):
            np.testing.assert_array_equal(np.asarray(saved), np.asarray(loaded))
        # new episodes: every agent starts one (its carry is reset at the first step), nothing truncated
        assert resumed.env.terminals.all() and not resumed.env.truncations.any()
        train_loop(resumed)
        assert resumed.update_index == 6
        result = play(resumed, episodes=6, num_envs=3)
    assert result["episodes"] == 6
    assert result["episode_return"] == pytest.approx(result["returns"].mean())  # CartPole: return = length
    np.testing.assert_array_equal(result["returns"], result["lengths"])


def test_train_cli_with_a_python_env_warns_once_over_several_checkpoints(tmp_path):
    run_dir = tmp_path / "run"
    result = subprocess.run([sys.executable, "-m", "jaxlab.cli", "train", "gymnasium:CartPole-v1", *SMALL,
                             "--train.total-timesteps", "512", "--checkpoint.interval", "2", "--run-dir", str(run_dir)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert len(list((run_dir / "checkpoints").iterdir())) >= 3
    assert result.stderr.count("this checkpoint holds no env state") == 1
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert len(records) == 8 and records[-1]["episodes"] > 0
    for flag in ("--render", "--gif"):  # said "no `render` option in its CENV_ENV", which it has no
        args = [flag] if flag == "--render" else [flag, str(tmp_path / "a.gif")]
        refused = subprocess.run([sys.executable, "-m", "jaxlab.cli", "eval", "gymnasium:CartPole-v1", "--checkpoint",
                                  str(run_dir), *args], capture_output=True, text=True, timeout=300)
        if flag == "--gif" and "needs Pillow" in refused.stderr:
            continue
        assert refused.returncode == 2 and refused.stderr.strip().splitlines() == [
            "jaxlab eval: error: env 'gymnasium:CartPole-v1' is a Python env: jaxlab draws no text or pictures of "
            "it (Gymnasium and PettingZoo envs render through their own render_mode); drop "
            "--render/--save-frames/--gif"], refused.stderr


def test_bench_compares_a_python_env_with_its_c_twin():
    from jaxlab.run.bench import report_env

    lines = report_env("gymnasium:CartPole-v1", 8, seconds=0.05)
    assert lines[0].startswith("env gymnasium:CartPole-v1: 8 agents, Python env (one thread):")
    assert lines[1].startswith("env cartpole (built-in C, steps like gymnasium:CartPole-v1): 8 agents")
    assert lines[1].endswith("x slower")


@pytest.mark.slow
def test_gymnasium_cartpole_is_solved_with_cartpoles_defaults():
    """Gymnasium's own CartPole-v1 through the adapter, with configs/envs/cartpole.toml's settings."""
    config, _ = load_config("gymnasium:CartPole-v1")
    records = train(config)
    recent = [r for r in records if r["episodes"]][-10:]
    mean_return = sum(r["episode_return"] * r["episodes"] for r in recent) / sum(r["episodes"] for r in recent)
    assert mean_return >= 475
    assert records[-1]["compiles"] == 3  # step, finish, update


def test_gymnasium_adapter_type():
    with jaxlab.make("gymnasium:CartPole-v1", num_envs=2, num_threads=4) as env:  # threads: ignored
        assert isinstance(env, GymnasiumVecEnv) and env.num_threads == 1
        assert env.observations.ctypes.data % 4096 == 0 and env.kind.log_names == ("episode_return", "episode_length")
        buffers = [env.observations, env.rewards, env.terminals, env.truncations, env.final_observations]
        env.reset()
        for _ in range(30):
            out = env.step(np.ones(2, np.int32))
        assert all(a is b for a, b in zip(out[:4], buffers))  # the same buffers, never reallocated


class Blowup(Countdown):
    """Countdown with Box actions whose observations turn NaN from step 2 (physics that blew up)."""

    def __init__(self):
        super().__init__(continuous=True)

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        return obs * (np.nan if self.t >= 2 else 1.0), reward, terminated, truncated, info


BLOWUP = "JaxlabTest/Blowup-v0"
if BLOWUP not in gym.registry:
    gym.register(BLOWUP, entry_point=Blowup, disable_env_checker=True)


def test_a_nan_action_from_nan_observations_names_the_observations_as_the_cause():
    """NaN observations make the policy's continuous action NaN, which the env refuses: the error says
    that the observations the policy acted on were NaN (the env's fault), not only that the action was."""
    from jaxlab.train.rollout import EnvStepError

    config, _ = load_config(f"gymnasium:{BLOWUP}", flags=[*SMALL, "--train.total-timesteps", "384"])
    with Trainer(config) as trainer, pytest.raises(EnvStepError) as err:
        train_loop(trainer, updates=1)
    message = str(err.value)
    assert "NaN action" in message, message
    assert re.search(r"; the observations the policy acted on held \d+ NaN or infinite values \(of 16\), returned "
                     rf"by env 'gymnasium:{BLOWUP}': fix the env so that its observations are finite numbers$",
                     message), message


class IntegerBox(Countdown):
    """Countdown with Box(0, 5, (2,), int64) actions: integers in a Box."""

    def __init__(self):
        super().__init__()
        self.action_space = gym.spaces.Box(0, 5, (2,), np.int64)


INTEGER_BOX = "JaxlabTest/IntegerBox-v0"
if INTEGER_BOX not in gym.registry:
    gym.register(INTEGER_BOX, entry_point=IntegerBox, disable_env_checker=True)


def test_an_integer_box_action_space_is_refused_not_fed_fractions():
    """jaxlab's Box actions are float32 samples: an env declaring a Box of integers used to be trained
    with fractions it never declared (2.37 for an int64 component); it is refused, with the fix."""
    with pytest.raises(ValueError, match=r"has action space Box\(0, 5, \(2,\), int64\), a Box of integers; "
                                         r"jaxlab's Box actions are continuous float32: wrap the env so that its "
                                         r"actions are a MultiDiscrete \(with start=low, nvec=high-low\+1\)"):
        jaxlab.make(f"gymnasium:{INTEGER_BOX}", num_envs=2)
    with pytest.raises(ValueError, match="a Box of integers"):
        spaces_of(f"gymnasium:{INTEGER_BOX}")


class Empty(Countdown):
    """Countdown whose observation (or action, with ``action``) space has no values at all."""

    def __init__(self, action=None):
        super().__init__()
        if action is None:
            self.observation_space = gym.spaces.Box(-1, 1, (0,), np.float32)
        else:
            self.action_space = action


EMPTY = "JaxlabTest/Empty-v0"
if EMPTY not in gym.registry:
    gym.register(EMPTY, entry_point=Empty, disable_env_checker=True)


@pytest.mark.parametrize("kwargs, expect", [
    ({}, r"has observation space Box\(\[\], \[\], \(0,\), float32\), of no values: jaxlab needs at least one number"),
    ({"action": gym.spaces.Box(-1, 1, (0,), np.float32)}, r"has action space Box\(\[\], \[\], \(0,\), float32\), "
                                                          r"of no components: jaxlab needs at least one"),
    ({"action": gym.spaces.MultiDiscrete(np.zeros(0, np.int64))}, r"action space MultiDiscrete\(\[\]\), of no comp"),
])
def test_a_space_of_no_values_is_refused(kwargs, expect):
    """A Box observation of shape (0,) died in the policy's compile with a JAX traceback, and a Box action
    of shape (0,) trained until the first checkpoint, which Orbax refused (zero-size arrays): refused
    when the env is made, like the C envs' spaces."""
    with pytest.raises(ValueError, match=expect):
        spaces_of(f"gymnasium:{EMPTY}", **kwargs)


AGENT_LIST_PZ = MISFIT_PZ + '''

class AgentList(Misfit):
    """Misfit whose step breaks the agent list as ``broken`` says: "kept" (agent b terminates but stays
    in env.agents) or "unseen" (agent a goes on without an observation); or what it returns:
    "unrewarded" (no reward for agent a), "truncated_unseen" (agent b truncated without an observation)."""

    def __init__(self, broken):
        super().__init__()
        self.broken = broken

    def step(self, actions):
        obs, rewards, terms, truncs, infos = super().step(actions)
        if self.broken == "kept":
            terms["b"] = True
        elif self.broken == "unrewarded":  # no reward for agent a, which acted
            rewards.pop("a")
        elif self.broken == "truncated_unseen":  # agent b truncated without its last observation
            truncs["b"] = True
            self.agents.remove("b")
            obs.pop("b")
        else:
            obs.pop("a")
        return obs, rewards, terms, truncs, infos


parallel_env = AgentList
'''


@pytest.mark.parametrize("broken, what", [
    ("kept", "flagged agent 'b' terminated or truncated but kept it in env.agents; a ParallelEnv removes an agent "
             "from env.agents in the step that ends it"),
    ("unseen", "returned no observation for agent 'a', which goes on; a ParallelEnv's step returns an observation "
               "for every agent that acted")])
def test_a_pettingzoo_env_that_breaks_its_agent_list_is_refused(tmp_path, monkeypatch, broken, what):
    """An agent flagged ended but kept in env.agents was stepped on and counted as a new episode in
    every later step (its env never reset); a live agent without an observation kept its previous one
    for the policy. Both are errors naming the env, the step and the agent."""
    (tmp_path / "agent_list_env.py").write_text(AGENT_LIST_PZ)
    monkeypatch.syspath_prepend(str(tmp_path))
    with jaxlab.make("pettingzoo:agent_list_env", num_envs=1, broken=broken) as env:
        env.reset()
        with pytest.raises(RuntimeError, match=re.escape(f"env 'pettingzoo:agent_list_env' #0 at step 0 {what}")):
            env.step(np.zeros(2, np.int32))
    sys.modules.pop("agent_list_env", None)


SHARED_AGENTS_PZ = MISFIT_PZ + '''

class SharedAgents(Misfit):
    """Misfit with a common bug: env.agents is possible_agents itself, and every agent ends in the
    first step and is removed from it, so the next reset lists no agent."""

    def reset(self, seed=None, options=None):
        self.agents = self.possible_agents
        return {a: self._obs() for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions):
        obs, rewards, terms, truncs, infos = super().step(actions)
        terms = {a: True for a in actions}
        self.agents.clear()
        return obs, rewards, terms, truncs, infos


parallel_env = SharedAgents
'''


def test_a_pettingzoo_reset_that_lists_no_agent_is_refused(tmp_path, monkeypatch):
    """A reset that left env.agents empty (here possible_agents emptied through a shared list) had every
    later step reset the env again and step nothing: all rows waiting, no episode ever ended, and a
    run trained on nothing with exit 0. It is an error naming the env, the step and the likely cause."""
    (tmp_path / "shared_agents_env.py").write_text(SHARED_AGENTS_PZ)
    monkeypatch.syspath_prepend(str(tmp_path))
    with jaxlab.make("pettingzoo:shared_agents_env", num_envs=2) as env:
        env.reset()
        with pytest.raises(RuntimeError, match=re.escape(
                "env 'pettingzoo:shared_agents_env' #0 at step 0: reset() left env.agents empty; its possible_agents "
                "changed from ['a', 'b'] to []; a ParallelEnv's reset lists the agents of the new episode (a common "
                "cause: self.agents = self.possible_agents without a copy")):
            env.step(np.zeros(4, np.int32))
    sys.modules.pop("shared_agents_env", None)


RESET_AGENTS_PZ = MISFIT_PZ + '''

class ResetAgents(Misfit):
    """Misfit that breaks the ParallelEnv contract as ``broken`` says: its reset returns no observation
    for agent b, which it lists ("unseen"), or an observation for agent c, not a possible agent
    ("stranger"); or its step adds agent c to env.agents ("joins")."""

    def __init__(self, broken):
        super().__init__()
        self.broken = broken

    def reset(self, seed=None, options=None):
        obs, infos = super().reset(seed, options)
        if self.broken == "unseen":
            obs.pop("b")
        elif self.broken == "stranger":
            obs["c"] = obs["a"]
        return obs, infos

    def step(self, actions):
        if self.broken == "joins":
            self.agents.append("c")
        return super().step(actions)


parallel_env = ResetAgents
'''


@pytest.mark.parametrize("broken, what", [
    ("unseen", "reset() returned no observation for agent 'b', which is in env.agents; a ParallelEnv's reset "
               "returns an observation for every agent of the new episode"),
    ("stranger", "reset() names agent 'c', which is not in its possible_agents ['a', 'b'] (read when the env was "
                 "made); a ParallelEnv lists every agent it may have in possible_agents"),
    ("joins", "env.agents names agent 'c', which is not in its possible_agents ['a', 'b']")])
def test_a_pettingzoo_env_whose_agents_and_observations_disagree_is_refused(tmp_path, monkeypatch, broken, what):
    """A reset without an observation for an agent it lists left that agent's row holding the last
    episode's observation (exit 0); an agent outside possible_agents in a reset's observations or in
    env.agents was a bare KeyError."""
    (tmp_path / "reset_agents_env.py").write_text(RESET_AGENTS_PZ)
    monkeypatch.syspath_prepend(str(tmp_path))
    step = 1 if broken == "joins" else 0
    message = re.escape(f"env 'pettingzoo:reset_agents_env' #0 at step {step}: {what}")
    with jaxlab.make("pettingzoo:reset_agents_env", num_envs=1, broken=broken) as env:
        with pytest.raises(RuntimeError, match=message):
            env.reset()
            env.step(np.zeros(2, np.int32))
            env.step(np.zeros(2, np.int32))
    if broken != "joins":  # before any training: spaces_of resets the env it makes
        with pytest.raises(RuntimeError, match=message):
            spaces_of("pettingzoo:reset_agents_env", broken=broken)
    sys.modules.pop("reset_agents_env", None)


OLD_API_PZ = MISFIT_PZ + '''

class OldApi(Misfit):
    """Misfit written for PettingZoo's older API as ``old`` says: its reset returns the observations
    alone ("reset") or its step four values with dones ("step")."""

    def __init__(self, old):
        super().__init__()
        self.old = old

    def reset(self, seed=None, options=None):
        obs, infos = super().reset(seed, options)
        return obs if self.old == "reset" else (obs, infos)

    def step(self, actions):
        obs, rewards, terms, truncs, infos = super().step(actions)
        return (obs, rewards, terms, infos) if self.old == "step" else (obs, rewards, terms, truncs, infos)


class NoSeed(Misfit):
    """Misfit whose reset takes no seed (PettingZoo's older API)."""

    def __init__(self, old):
        super().__init__()

    def reset(self):
        return super().reset()


def parallel_env(old):
    return NoSeed(old) if old == "noseed" else OldApi(old)
'''


@pytest.mark.parametrize("old, what", [
    ("reset", r"its reset\(\) returned \{'a': array\(\[0., 0., 0.\], dtype=float32\), .* \(dict\), not the tuple "
              r"\(observations, infos\) of a ParallelEnv; return those 2 dicts \(an env written for PettingZoo's "
              r"older API returned the observations alone\)"),
    ("step", r"its step\(\) returned a tuple of 4, not the tuple \(observations, rewards, terminations, truncations, "
             r"infos\) of a ParallelEnv; return those 5 dicts \(an env written for PettingZoo's older API returned "
             r"observations, rewards, dones, infos: dones is now terminations and truncations\)"),
    ("noseed", r"its reset\(\) takes no seed keyword \(TypeError: NoSeed.reset\(\) got an unexpected keyword "
               r"argument 'seed'\); the reset of a ParallelEnv is def reset\(self, seed=None, options=None\)")])
def test_a_pettingzoo_env_of_the_old_api_says_so(tmp_path, monkeypatch, old, what):
    """A reset returning the observations alone unpacked a dict of two agents into its keys ('str' object
    has no attribute 'get'); a step of four values was 'not enough values to unpack (expected 5, got 4)'."""
    (tmp_path / "old_api_env.py").write_text(OLD_API_PZ)
    monkeypatch.syspath_prepend(str(tmp_path))
    where = "" if old == "noseed" else " #0"  # the reset's signature: that of every env
    with pytest.raises(ValueError, match=f"env 'pettingzoo:old_api_env'{where}: " + what):
        with jaxlab.make("pettingzoo:old_api_env", num_envs=1, old=old) as env:  # made: reset once for masks
            env.reset()
            env.step(np.zeros(2, np.int32))
    sys.modules.pop("old_api_env", None)


class OldGym(Countdown):
    """Countdown written for the old gym API as ``old`` says: its reset returns the observation alone
    ("reset"), or its step four values with done ("step")."""

    def __init__(self, old):
        super().__init__()
        self.old = old

    def reset(self, seed=None, options=None):
        obs, info = super().reset(seed=seed)
        return obs if self.old == "reset" else (obs, info)

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        if self.old == "step":
            return obs, reward, terminated or truncated, info
        return obs, reward, terminated, truncated, info



class NoSeedGym(Countdown):
    """Countdown whose reset takes no seed or options (the old gym API's reset())."""

    def reset(self):
        return super().reset()


OLD_GYM = "JaxlabTest/OldGym{}-v0"
if OLD_GYM.format("noseed") not in gym.registry:
    gym.register(OLD_GYM.format("noseed"), entry_point=NoSeedGym, max_episode_steps=4, disable_env_checker=True)
for _old in ("reset", "step"):
    if OLD_GYM.format(_old) not in gym.registry:
        gym.register(OLD_GYM.format(_old), entry_point=OldGym, kwargs={"old": _old}, max_episode_steps=4,
                     disable_env_checker=True)


@pytest.mark.parametrize("old, what", [
    ("reset", r"its reset\(\) returned array\(\[0., 0.\]\) \(ndarray\), not the pair \(observation, info\) of "
              r"Gymnasium's API; return obs, \{\} \(an env written for the old gym API returned the observation alone\)"),
    ("step", r"its step\(\) returned a tuple of 4, not the 5 values \(observation, reward, terminated, truncated, "
             r"info\) of Gymnasium's API \(an env written for the old gym API returned 4: obs, reward, done, info; "
             r"done is now terminated"),
    ("noseed", r"its reset\(\) takes no seed keyword \(TypeError: NoSeedGym.reset\(\) got an unexpected keyword "
               r"argument 'seed'\); the reset of Gymnasium's API is def reset\(self, seed=None, options=None\), which "
               r"calls super\(\).reset\(seed=seed\)")])
def test_a_gymnasium_env_of_the_old_gym_api_says_so_before_training(old, what):
    """The vector env's errors for such envs named neither the env nor the API: 'numpy.float64' object
    has no attribute 'items' (reset), 'not enough values to unpack (expected 5, got 4)' (step, and only
    once training had started). spaces_of, which every command calls first, tries one reset and step;
    jaxlab.make's envs say the same when Gymnasium fails on what they returned."""
    name = "gymnasium:" + OLD_GYM.format(old)
    with pytest.raises(ValueError, match=f"env '{name}': " + what):
        spaces_of(name)
    with pytest.raises(ConfigError, match=f"env '{name}': " + what):  # the CLI's check before anything: exit 2
        env_shape(load_config(name)[0])
    # jaxlab.make's reset and step, too (no spaces_of before them): the errors above, or a TypeError for noseed
    with pytest.raises(ValueError, match=f"env '{name}': " + what), jaxlab.make(name, num_envs=2) as env:
        env.reset()
        env.step(np.zeros(2, np.int32))


SINGLETON_PZ = MISFIT_PZ + '''

ONE = Misfit()


def parallel_env(**kwargs):
    return ONE  # a module-level instance: every env jaxlab makes would be this one object
'''

SINGLETON = "JaxlabTest/Singleton-v0"
if SINGLETON not in gym.registry:
    _one_countdown = Countdown()
    gym.register(SINGLETON, entry_point=lambda: _one_countdown, disable_env_checker=True)


def test_an_env_maker_returning_one_object_for_every_env_is_refused(tmp_path, monkeypatch):
    """parallel_env() (or a Gymnasium entry point) returning one module-level instance gave every env the
    same object, stepped once per env and step: garbage observations with exit 0. It is refused; and as
    only several envs show it (the env made to read the spaces is one), the trainer's own envs failing
    while made is one ConfigError line too (was a traceback)."""
    from jaxlab.train.trainer import make_group_envs

    (tmp_path / "singleton_env.py").write_text(SINGLETON_PZ)
    monkeypatch.syspath_prepend(str(tmp_path))
    for name, maker in (("pettingzoo:singleton_env", "singleton_env.parallel_env()"),
                        (f"gymnasium:{SINGLETON}", "its entry point")):
        message = re.escape(f"env '{name}': {maker} returned the same env object for several of jaxlab's 2 envs, "
                            "which would all step that one object; make a new env on every call")
        with pytest.raises(ValueError, match=message):
            jaxlab.make(name, num_envs=2)
        spaces_of(name)  # one env: nothing to see
        config = load_config(name, flags=["--vec.num-envs", "2"])[0]
        with pytest.raises(ConfigError, match=message):
            make_group_envs(config, 1)
    sys.modules.pop("singleton_env", None)


@pytest.mark.parametrize("broken, what", [
    ("unrewarded", "env 'pettingzoo:agent_list_env' #0 agent 'a' at step 0: it acted, and its step returned no "
                   "reward for it; a ParallelEnv's step returns a reward for every agent that acted (0 when it "
                   "earned none)"),
    ("truncated_unseen", "env 'pettingzoo:agent_list_env' #0 at step 0 truncated agent 'b' without its last "
                         "observation, which jaxlab bootstraps the cut episode's value from")])
def test_a_pettingzoo_step_leaving_out_what_an_agent_needs_is_refused(tmp_path, monkeypatch, broken, what):
    """A reward left out for an agent that acted was read as 0, and an agent truncated without an
    observation was bootstrapped from its previous one: both silent, exit 0."""
    (tmp_path / "agent_list_env.py").write_text(AGENT_LIST_PZ)
    monkeypatch.syspath_prepend(str(tmp_path))
    with jaxlab.make("pettingzoo:agent_list_env", num_envs=1, broken=broken) as env:
        env.reset()
        with pytest.raises((ValueError, RuntimeError), match=re.escape(what)):
            env.step(np.zeros(2, np.int32))
    sys.modules.pop("agent_list_env", None)


JOINER_PZ = MISFIT_PZ + '''

class Joiner(Misfit):
    """Misfit whose agent b is not in the episode at reset and joins it in the first step, with the
    observation (0.5, 0.5, 0.5), or without one when ``silent``."""

    def __init__(self, silent=False):
        super().__init__()
        self.silent = silent

    def reset(self, seed=None, options=None):
        self.agents = ["a"]
        return {"a": self._obs()}, {"a": {}}

    def step(self, actions):
        obs, rewards, terms, truncs, infos = super().step(actions)
        if "b" not in self.agents:
            self.agents.append("b")
            if not self.silent:
                obs["b"] = np.full(3, 0.5, np.float32)
        return obs, rewards, terms, truncs, infos


parallel_env = Joiner
'''


def test_a_pettingzoo_agent_left_out_of_a_reset_waits(tmp_path, monkeypatch):
    """An agent of possible_agents that a reset leaves out of env.agents was marked active after reset()
    (the adapter's reset set every row active after the env's reset had cleared it), so the first step
    counted it as an agent-episode of return 0 and length 1, and the learner took its row. It waits."""
    (tmp_path / "joiner_env.py").write_text(JOINER_PZ)
    monkeypatch.syspath_prepend(str(tmp_path))
    with jaxlab.make("pettingzoo:joiner_env", num_envs=2) as env:
        env.reset()
        np.testing.assert_array_equal(env.active, [True, False, True, False])
        info = env.step(np.zeros(4, np.int32))[4]
        assert info == {}  # no episode ended: b only waited
    sys.modules.pop("joiner_env", None)


def test_a_pettingzoo_agent_joining_an_episode_acts_on_its_own_first_observation(tmp_path, monkeypatch):
    """An agent of possible_agents added to env.agents by a step (not there at reset) had the observation
    the step returned for it dropped, and acted in the next step on its row's old contents (zeros, or
    another episode's). Its observation is written; a join without one is an error."""
    (tmp_path / "joiner_env.py").write_text(JOINER_PZ)
    monkeypatch.syspath_prepend(str(tmp_path))
    with jaxlab.make("pettingzoo:joiner_env", num_envs=1) as env:
        env.reset()
        np.testing.assert_array_equal(env.active, [True, False])
        env.step(np.zeros(2, np.int32))
        np.testing.assert_array_equal(env.active, [True, True])
        np.testing.assert_array_equal(env.observations[1], [0.5, 0.5, 0.5])
        env.step(np.zeros(2, np.int32))
        np.testing.assert_array_equal(env.rewards, [1.0, 1.0])  # b acted
    with jaxlab.make("pettingzoo:joiner_env", num_envs=1, silent=True) as env:
        env.reset()
        with pytest.raises(RuntimeError, match=re.escape("env 'pettingzoo:joiner_env' #0 at step 0 added agent 'b' to "
                                                         "env.agents without an observation for it")):
            env.step(np.zeros(2, np.int32))
    sys.modules.pop("joiner_env", None)


def test_a_namespaced_python_envs_default_run_dir_is_one_folder_that_resume_latest_finds(tmp_path):
    """A Python env id with '/' (gymnasium:MODULE:NS/ID, pettingzoo:butterfly/pistonball-v6) made the default
    run dir nested, runs/gymnasium:MODULE:NS/ID-TIMESTAMP: `--resume latest` said no run of the env had
    checkpoints and `jaxlab runs` listed none; and `jaxlab sweep` of any Python env refused its own default
    study name ('--study ... must be letters, digits, ...'). Both now replace such characters with '_'."""
    import os

    from jaxlab.observe.records import folder_name

    assert folder_name("pettingzoo:butterfly/pistonball-v6") == "pettingzoo_butterfly_pistonball-v6"
    assert folder_name("cartpole") == "cartpole"
    (tmp_path / "jaxlab_registers.py").write_text(REGISTERS)
    name = "gymnasium:jaxlab_registers:JaxlabTest/FromModule-v0"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}  # this checkout's jaxlab first
    sweep = subprocess.run([sys.executable, "-m", "jaxlab.cli", "sweep", "gymnasium:CartPole-v1", "--show"],
                           cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert "jaxlab sweep: error: no study 'gymnasium_CartPole-v1-" in sweep.stderr, sweep.stderr  # its own name taken

    def train(*args):
        return subprocess.run([sys.executable, "-m", "jaxlab.cli", "train", name, *SMALL, *args], cwd=tmp_path,
                              env=env, capture_output=True, text=True, timeout=300)

    first = train("--train.total-timesteps", "128")
    assert first.returncode == 0, first.stderr
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert run_dir.name.startswith("gymnasium_jaxlab_registers_JaxlabTest_FromModule-v0-")
    assert (run_dir / "checkpoints").is_dir()
    resumed = train("--resume", "latest", "--train.total-timesteps", "256")
    assert resumed.returncode == 0, resumed.stderr
    assert f"resumed from runs/{run_dir.name}/checkpoints/2 at update 2" in resumed.stderr


def test_the_readmes_own_envs_work_as_it_says(tmp_path, monkeypatch):
    """The README's module of a Gymnasium env and a PettingZoo parallel env of one's own (my_envs.py) is
    what a new user copies: it must make, step and end episodes as the README's commands say."""
    from pathlib import Path

    readme = (Path(__file__).parent.parent / "README.md").read_text()
    block = readme.split("Your own envs, in a module on `PYTHONPATH`", 1)[1].split("```python\n", 1)[1]
    (tmp_path / "my_envs.py").write_text(block.split("\n```", 1)[0])
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        with jaxlab.make("gymnasium:my_envs:Corridor-v0", num_envs=2) as env:
            env.reset()
            infos = [env.step(np.ones(2, np.int32))[4] for _ in range(8)]
        assert infos[:7] == [{}] * 7 and infos[7] == {"episodes": 2, "episode_return": 1.0, "episode_length": 8.0}
        with jaxlab.make("pettingzoo:my_envs", num_envs=2) as env:
            env.reset()
            infos = [env.step(np.ones(4, np.int32))[4] for _ in range(4)]
        assert infos[:3] == [{}] * 3 and infos[3] == {"episodes": 4, "episode_return": 1.0, "episode_length": 4.0}
        assert spaces_of("pettingzoo:my_envs").agents_per_env == 2
        with jaxlab.make("pettingzoo:my_envs", num_envs=1) as env:  # truncated after 50 steps
            env.reset()
            truncations = [env.step(np.zeros(2, np.int32))[3].copy() for _ in range(50)]
        assert not np.any(truncations[:49]) and truncations[49].all()
    finally:
        sys.modules.pop("my_envs", None)
        gym.registry.pop("Corridor-v0", None)


class BinaryActions(Countdown):
    """Countdown with MultiBinary(3) actions, which jaxlab does not take."""

    action_space = gym.spaces.MultiBinary(3)

    def __init__(self):
        pass


BINARY_ACTIONS = "JaxlabTest/BinaryActions-v0"
if BINARY_ACTIONS not in gym.registry:
    gym.register(BINARY_ACTIONS, entry_point=BinaryActions, disable_env_checker=True)


def test_a_space_jaxlab_does_not_take_comes_with_a_recipe_that_works():
    """'wrap the env (gymnasium.wrappers.FlattenObservation, ...) in your own module' left a Gymnasium user
    to find out how a wrapped env becomes a name jaxlab trains. The message gives the registration; run
    as written, it makes an env jaxlab takes."""
    with pytest.raises(ValueError) as caught:
        jaxlab.make("gymnasium:FrozenLake-v1")
    message = str(caught.value)
    assert message.startswith("env 'gymnasium:FrozenLake-v1' has observation space Discrete(16); jaxlab takes Box "
                              "observations: register the env wrapped in a module of yours, e.g. ")
    recipe = re.search(r"e\.g\. (gymnasium\.register\(.*\)), and train gymnasium:MODULE:Wrapped-v0$", message)[1]
    try:
        exec(recipe, {"gymnasium": gym})
        with jaxlab.make("gymnasium:Wrapped-v0", num_envs=2) as env:
            assert env.observation_space.shape == (16,) and env.reset().sum() == 2  # one-hot: the start cell
    finally:
        gym.registry.pop("Wrapped-v0", None)
    with pytest.raises(ValueError, match=re.escape(
            "has action space MultiBinary(3); jaxlab takes Discrete, 1-D MultiDiscrete and 1-D Box actions: give it "
            "one with an ActionWrapper of yours; register the env wrapped in a module of yours, e.g. "
            "gymnasium.register('Wrapped-v0', entry_point=lambda **kw: MyActionWrapper(gymnasium.make("
            f"'{BINARY_ACTIONS}', **kw))), and train gymnasium:MODULE:Wrapped-v0")):
        jaxlab.make(f"gymnasium:{BINARY_ACTIONS}")
    from jaxlab.env.python_envs import _how_to_wrap

    assert _how_to_wrap("pettingzoo:my_envs", "supersuit.flatten_v0") == (
        "make your parallel_env() return the env wrapped, e.g. supersuit.flatten_v0(env)")


class Guarded(gym.Env):
    """Actions Discrete(4) (MultiDiscrete([3, 4]) with multi=True) of which two per component are legal,
    drawn at every reset and step and given as the "action_mask" of a Dict observation (the layout of
    masked PettingZoo envs), whose "observation" is [the mask as floats..., t]. A legal action earns 1; an
    illegal one -1, ends the episode and is counted in ``illegal`` (over all instances, as ``steps``).
    Episodes end at step 6."""

    illegal = steps = 0

    def __init__(self, multi=False):
        self.nvec = (3, 4) if multi else (4,)
        self.action_space = gym.spaces.MultiDiscrete(self.nvec) if multi else gym.spaces.Discrete(4)
        width = sum(self.nvec)
        self.observation_space = gym.spaces.Dict({"observation": gym.spaces.Box(0, 6, (width + 1,), np.float32),
                                                  "action_mask": gym.spaces.MultiBinary(width)})

    def _obs(self):
        self.mask = [np.isin(np.arange(n), self.np_random.choice(n, 2, replace=False)) for n in self.nvec]
        flat = np.concatenate(self.mask).astype(np.int8)
        return {"observation": np.append(flat, self.t).astype(np.float32), "action_mask": flat}

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        type(self).steps += 1
        legal = all(m[a] for m, a in zip(self.mask, np.atleast_1d(action)))
        type(self).illegal += not legal
        return self._obs(), 1.0 if legal else -1.0, self.t == 6 or not legal, False, {}


GUARDED = "JaxlabTest/Guarded-v0"
if GUARDED not in gym.registry:
    gym.register(GUARDED, entry_point=Guarded, disable_env_checker=True)


@pytest.mark.parametrize("multi", [False, True])
def test_a_gymnasium_dict_of_observation_and_action_mask_is_read_as_pettingzoos(multi):
    """Such an env was refused, with a FlattenObservation recipe that would make the mask one more input
    and drop the masking. Its "observation" fills observations and final_observations, its "action_mask"
    the mask rows, checked strictly."""
    from jaxlab.env.spaces import legal_argmax

    width = 7 if multi else 4
    with jaxlab.make(f"gymnasium:{GUARDED}", num_envs=3, multi=multi) as env:
        assert env.kind.has("mask") and env.has_mask and env.observation_space.shape == (width + 1,)
        obs = env.reset()
        assert env.action_mask.shape == (3, width) and (obs[:, -1] == 0).all()
        np.testing.assert_array_equal(env.action_mask, obs[:, :width] > 0)
        for t in range(1, 7):
            actions = legal_argmax(env.action_space, env.action_mask, np.ones((3, width)))
            obs, rewards, terminals, *_ = env.step(actions)
            np.testing.assert_array_equal(rewards, np.ones(3))
            np.testing.assert_array_equal(env.action_mask, obs[:, :width] > 0)
            assert terminals.all() == (t == 6) and (obs[:, -1] == t % 6).all()
        np.testing.assert_array_equal(env.final_observations[:, -1], np.full(3, 6))
        illegal = legal_argmax(env.action_space, ~env.action_mask, np.ones((3, width)))
        with pytest.raises(ValueError, match=r"#0 agent 0 \(row 0\) at step 6: action \d( component 0)? is not "
                                                   r"legal under its mask"):
            env.step(illegal)
    assert spaces_of(f"gymnasium:{GUARDED}", multi=multi).mask_width == width
    with jaxlab.make(f"gymnasium:{GUARDED}", num_envs=3, multi=multi, mask_check="off") as env:
        env.reset()
        before = Guarded.illegal
        _, rewards, terminals, *_ = env.step(legal_argmax(env.action_space, ~env.action_mask, np.ones((3, width))))
        assert Guarded.illegal == before + 3 and (rewards == -1).all() and terminals.all()


def test_training_on_a_masked_gymnasium_env_never_takes_an_illegal_action():
    """With the mask check off, only the policy's masking keeps the env from illegal actions (half of them
    are, at every step)."""
    illegal, steps = Guarded.illegal, Guarded.steps  # also over the step of spaces_of's API check
    config, _ = load_config(f"gymnasium:{GUARDED}", flags=[*SMALL, "--train.total-timesteps", "1024",
                                                            "--env.mask-check", "off"])
    records = train(config)
    assert records[-1]["episodes"] > 0 and Guarded.steps - steps >= 1024
    assert Guarded.illegal == illegal


class MisMasked(gym.Env):
    """A Dict observation space with "action_mask" that is not the layout jaxlab reads, as ``broken`` says."""

    def __init__(self, broken):
        box = gym.spaces.Box(0, 1, (2,), np.float32)
        entries = {"observation": box, "action_mask": gym.spaces.MultiBinary(3)}
        self.action_space = gym.spaces.Discrete(3)
        if broken == "goal":
            entries["goal"] = box
        elif broken == "no observation":
            entries["position"] = entries.pop("observation")
        elif broken == "discrete":
            entries["observation"] = gym.spaces.Discrete(5)
        else:
            self.action_space = gym.spaces.Box(-1, 1, (3,), np.float32)
        self.observation_space = gym.spaces.Dict(entries)


MIS_MASKED = "JaxlabTest/MisMasked-v0"
if MIS_MASKED not in gym.registry:
    gym.register(MIS_MASKED, entry_point=MisMasked, disable_env_checker=True)


@pytest.mark.parametrize("broken, what", [
    ("goal", r"with 'action_mask' and other entries \['goal'\]; jaxlab reads a Dict observation as \{'observation': "
             r"a Box, 'action_mask': one entry per action\}.*drop the masking\): put the other observations into "
             r"one Box under 'observation' with an ObservationWrapper of yours; register the env wrapped"),
    ("no observation", r"with 'action_mask' and no 'observation' entry; jaxlab reads"),
    ("discrete", r"whose 'observation' is Discrete\(5\), not a Box; jaxlab reads .*: make 'observation' a Box"),
    ("continuous", r"has an 'action_mask' in its observation space .* and action space Box.*an action mask masks "
                   r"Discrete or MultiDiscrete actions, not continuous ones: leave the mask out of the observations"),
])
def test_a_gymnasium_dict_with_an_action_mask_jaxlab_cannot_read_is_refused_without_a_flatten_recipe(broken, what):
    with pytest.raises(ValueError, match=what) as caught:
        jaxlab.make(f"gymnasium:{MIS_MASKED}", broken=broken)
    assert "FlattenObservation" not in str(caught.value)


MIS_MASKED_PZ = '''
"""Two agents whose Dict observation space (or infos) hold an "action_mask" or an "observation" in a
layout jaxlab cannot read, as ``broken`` says."""
import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv


class MisMasked(ParallelEnv):
    metadata = {"name": "mismasked_v0"}

    def __init__(self, broken):
        self.possible_agents, self.broken = ["a", "b"], broken
        box = spaces.Box(0, 1, (2,), np.float32)
        self.entries = {"observation": box, "action_mask": spaces.MultiBinary(3)}
        self.action = spaces.Discrete(3)
        if broken in ("goal", "goal without a mask"):
            self.entries["goal"] = box
        if broken == "goal without a mask":
            del self.entries["action_mask"]
        elif broken == "no observation":
            self.entries["position"] = self.entries.pop("observation")
        elif broken == "discrete":
            self.entries["observation"] = spaces.Discrete(5)
        elif broken in ("continuous", "continuous with a mask in the infos"):
            self.action = spaces.Box(-1, 1, (3,), np.float32)

    def observation_space(self, agent):
        if self.broken == "continuous with a mask in the infos":
            return self.entries["observation"]
        return spaces.Dict(self.entries)

    def action_space(self, agent):
        return self.action

    def reset(self, seed=None, options=None):
        self.agents = list(self.possible_agents)
        observation = self.observation_space("a").sample()
        mask = {"action_mask": np.ones(3, np.int8)} if self.broken == "continuous with a mask in the infos" else {}
        return {a: observation for a in self.agents}, {a: dict(mask) for a in self.agents}

    def step(self, actions):
        return ({a: self.observation_space(a).sample() for a in actions}, {a: 0.0 for a in actions},
                {a: False for a in actions}, {a: False for a in actions}, {a: {} for a in actions})


parallel_env = MisMasked
'''


@pytest.mark.parametrize("broken, what", [
    ("goal", r"with 'action_mask' and other entries \['goal'\]; jaxlab reads a Dict observation as \{'observation': "
             r"a Box, 'action_mask': one entry per action\}.*drop the masking\): put the other observations into "
             r"one Box under 'observation' with an ObservationWrapper of yours; make your parallel_env\(\) return"),
    ("goal without a mask", r"with 'observation' and other entries \['goal'\]; jaxlab reads a Dict observation as "
                            r"\{'observation': a Box, 'action_mask': one entry per action\}.*: put the other"),
    ("no observation", r"with 'action_mask' and no 'observation' entry; jaxlab reads"),
    ("discrete", r"whose 'observation' is Discrete\(5\), not a Box; jaxlab reads .*: make 'observation' a Box"),
    ("continuous", r"has an 'action_mask' in its observation space .* and action space Box.*an action mask masks "
                   r"Discrete or MultiDiscrete actions, not continuous ones: leave the mask out of the observations"),
    ("continuous with a mask in the infos", r"has an 'action_mask' in the infos its reset returns and action space "
                                            r"Box.*not continuous ones: leave the mask out of the infos"),
])
def test_a_pettingzoo_dict_or_mask_jaxlab_cannot_read_is_refused_as_gymnasiums(tmp_path, monkeypatch, broken, what):
    """A mask over continuous actions was ignored and the entries beside "observation" were dropped, with no
    word; the other layouts were refused as "not a Box" with a flatten recipe that drops the masking."""
    (tmp_path / "mismasked_env.py").write_text(MIS_MASKED_PZ)
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        with pytest.raises(ValueError, match="^env 'pettingzoo:mismasked_env' .*" + what) as caught:
            jaxlab.make("pettingzoo:mismasked_env", broken=broken)
        assert "flatten_v0" not in str(caught.value)
    finally:
        sys.modules.pop("mismasked_env", None)

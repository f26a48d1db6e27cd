"""Your own Flax module (policy.module = "package.module:Class" or "path/to/file.py:Class"), with
examples/policies/gru.py: loaded by both spellings, trained a little (rollout and update, one compile
each), saved and resumed bit for bit, evaluated from its checkpoint in a fresh process; and the
contract's errors."""

import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

from jaxlab.config import ConfigError, load_config
from jaxlab.run.loop import train_loop
from jaxlab.train.trainer import Trainer

ROOT = Path(__file__).resolve().parent.parent
GRU_FILE = f"{ROOT}/examples/policies/gru.py:GRUPolicy"
SMALL = ["--vec.num-envs", "8", "--train.bptt-horizon", "8", "--train.minibatch-size", "16",
         "--policy.hidden-size", "16"]


def config_of(env="memory", updates=6, module=GRU_FILE, *flags):
    config, _ = load_config(env, flags=[*SMALL, "--policy.module", module,
                                        "--train.total-timesteps", str(64 * updates), *flags])
    return config


def test_the_gru_example_trains_through_rollout_and_update_with_one_compile_each():
    with Trainer(config_of("memory", 6), max_traces=1) as trainer:
        params = trainer.state.params["module"]["params"]
        assert "GRUCell_0" in params and params["GRUCell_0"]["hn"]["kernel"].shape == (16, 16)
        assert trainer.rollout.carry.shape == (8, 16)  # the GRU's carry: one array h [A, H]
        before = jax.tree.map(np.asarray, trainer.state.params)
        records = train_loop(trainer)
    assert records[-1]["compiles"] == 3 and all(np.isfinite(r["policy_loss"]) for r in records)
    assert any(not np.array_equal(x, y) for x, y in zip(jax.tree.leaves(before), jax.tree.leaves(trainer.state.params)))


def test_continuous_actions_get_jaxlabs_log_std():
    with Trainer(config_of("pendulum", 2)) as trainer:
        assert trainer.state.params["log_std"].shape == (1,)
        records = train_loop(trainer)
    assert np.isfinite(records[-1]["policy_loss"])


def test_package_module_spelling_with_the_examples_on_the_path(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "examples" / "policies"))
    with Trainer(config_of("cartpole", 2, "gru:GRUPolicy")) as trainer:
        assert type(trainer.policy.module).__name__ == "GRUPolicy"
        train_loop(trainer, updates=1)


def test_the_gru_learns_the_memory_task_a_little():
    """Memory (cue, 2 blank steps, query; 4 cues): random answers succeed 1/4 of the time."""
    config, _ = load_config("memory", flags=["--policy.module", GRU_FILE, "--env.delay", "2",
                                             "--train.total-timesteps", "150000"])
    with Trainer(config) as trainer:
        records = train_loop(trainer)
    recent = [r for r in records if r["episodes"]][-5:]
    success = sum(r["success"] * r["episodes"] for r in recent) / sum(r["episodes"] for r in recent)
    assert success >= 0.6, success


def test_checkpoint_resume_is_exact_and_eval_loads_the_module_from_the_path(tmp_path):
    config = config_of("memory", 6)
    with Trainer(config) as straight:
        train_loop(straight, updates=6)
        reference = jax.tree.map(np.asarray, straight.state.params)
    with Trainer(config) as first:
        train_loop(first, updates=3)
        first.save_checkpoint(tmp_path / "ck")
    with Trainer(config) as second:
        second.load_checkpoint(tmp_path / "ck")
        train_loop(second, updates=3)
        for x, y in zip(jax.tree.leaves(reference), jax.tree.leaves(second.state.params), strict=True):
            np.testing.assert_array_equal(x, y)
    # a fresh process in another directory: the module comes from the absolute path in the saved config
    result = subprocess.run([sys.executable, "-m", "jaxlab.cli", "eval", "memory", "--checkpoint", str(tmp_path / "ck"),
                             "--episodes", "8"], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                            env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 0, result.stdout + result.stderr
    assert "return" in result.stdout


def test_contract_errors_name_the_problem():
    with pytest.raises(ConfigError, match=r"must name a class"):
        Trainer(config_of("cartpole", 2, "gru"))
    with pytest.raises(ConfigError, match=r"^policy.module='/.*/gru.py' must name a class"):  # was quoted 'gru.py:'
        Trainer(config_of("cartpole", 2, f"{ROOT}/examples/policies/gru.py"))
    with pytest.raises(ConfigError, match=r"'/.*/gru' is a path but not to a .py file; give the file, e.g. "
                                          r"\"/.*/gru.py:GRUPolicy\""):  # was "No module named '/.../gru'"
        Trainer(config_of("cartpole", 2, f"{ROOT}/examples/policies/gru:GRUPolicy"))
    with pytest.raises(ConfigError, match=r"no such file"):
        Trainer(config_of("cartpole", 2, "/nowhere/x.py:X"))
    with pytest.raises(ConfigError, match=r"has no 'Nope'"):
        Trainer(config_of("cartpole", 2, f"{ROOT}/examples/policies/gru.py:Nope"))
    with pytest.raises(ConfigError, match=r"importing 'no_such_package_xyz' failed"):
        Trainer(config_of("cartpole", 2, "no_such_package_xyz:X"))


#: Modules that break the contract, one way each (written to a file: policy.module takes a path).
BROKEN = '''
import flax.linen as nn
import jax.numpy as jnp
from jaxlab.agent.distributions import ActionSpec


class Good(nn.Module):
    action: ActionSpec

    @nn.compact
    def __call__(self, carry, obs):
        x = nn.Dense(16)(obs.reshape(obs.shape[0], -1).astype(jnp.float32))
        return carry, nn.Dense(self.action.head_size)(x), nn.Dense(1)(x)[:, 0]


class WrongHead(Good):
    @nn.compact
    def __call__(self, carry, obs):
        x = nn.Dense(16)(obs)
        return carry, nn.Dense(7)(x), nn.Dense(1)(x)[:, 0]


class ValueColumn(Good):
    @nn.compact
    def __call__(self, carry, obs):
        x = nn.Dense(16)(obs)
        return carry, nn.Dense(self.action.head_size)(x), nn.Dense(1)(x)


class TwoOutputs(Good):
    @nn.compact
    def __call__(self, carry, obs):
        x = nn.Dense(16)(obs)
        return nn.Dense(self.action.head_size)(x), nn.Dense(1)(x)[:, 0]


class NoCarryArgument(Good):
    @nn.compact
    def __call__(self, obs):
        return nn.Dense(self.action.head_size)(obs)


class Raises(Good):
    @nn.compact
    def __call__(self, carry, obs):
        raise RuntimeError("a bug in the step")


class CarryRaises(Good):
    def initial_carry(self, num_agents):
        raise RuntimeError("a bug in the carry")


class NeedsField(Good):
    width: int


class CarryWithoutAgents(Good):
    def initial_carry(self, num_agents):
        return jnp.zeros((1, 8))


class CarryOfTwoAgents(Good):
    def initial_carry(self, num_agents):
        return {"h": jnp.zeros((num_agents, 8)), "c": jnp.zeros((2, 8))}


class CarryChangesDtype(Good):
    def initial_carry(self, num_agents):
        return jnp.zeros((num_agents, 8))

    @nn.compact
    def __call__(self, carry, obs):
        h = nn.Dense(8, dtype=jnp.bfloat16)(jnp.concatenate([obs, carry], -1))  # a bfloat16 carry out
        return h, nn.Dense(self.action.head_size)(h), nn.Dense(1)(h)[:, 0]


class NoParams(Good):
    def __call__(self, carry, obs):  # no layer: nothing to train
        return carry, jnp.zeros((obs.shape[0], self.action.head_size)), jnp.zeros(obs.shape[0])


class IntegerHead(Good):
    @nn.compact
    def __call__(self, carry, obs):
        x = nn.Dense(16)(obs)
        return carry, nn.Dense(self.action.head_size)(x).astype(jnp.int32), nn.Dense(1)(x)[:, 0]


class CarryListToTuple(Good):
    def initial_carry(self, num_agents):
        return [jnp.zeros((num_agents, 4)), jnp.zeros((num_agents, 2))]

    def __call__(self, carry, obs):
        return tuple(carry), *Good.__call__(self, carry, obs)[1:]


class NaNValue(Good):
    @nn.compact
    def __call__(self, carry, obs):
        carry, head, value = Good.__call__(self, carry, obs)
        return carry, head, value * jnp.nan


class NaNHead(Good):
    @nn.compact
    def __call__(self, carry, obs):
        carry, head, value = Good.__call__(self, carry, obs)
        return carry, head * jnp.nan, value


class WithBatchNorm(Good):
    @nn.compact
    def __call__(self, carry, obs):
        return Good.__call__(self, carry, nn.BatchNorm(use_running_average=False)(obs))


class FeedForwardDropsCarry(Good):
    @nn.compact
    def __call__(self, carry, obs):
        return None, *Good.__call__(self, carry, obs)[1:]


class Unrolled(Good):
    def unroll(self, carry, obs, reset):  # feed-forward: every step at once
        T, A = obs.shape[:2]
        _, head, value = self(carry, obs.reshape(T * A, *obs.shape[2:]))
        return carry, head.reshape(T, A, -1), value.reshape(T, A)


class Recurrent(Good):
    def initial_carry(self, num_agents):
        return jnp.zeros((num_agents, 8))

    @nn.compact
    def __call__(self, carry, obs):
        h = jnp.tanh(nn.Dense(8)(jnp.concatenate([obs.reshape(obs.shape[0], -1), carry], -1)))
        return h, nn.Dense(self.action.head_size)(h), nn.Dense(1)(h)[:, 0]


class ForgetsNewCarry(Recurrent):
    @nn.compact
    def __call__(self, carry, obs):  # the new carry computed, the old one returned: memory never changes
        return carry, *Recurrent.__call__(self, carry, obs)[1:]


class ReadsNoCarry(Recurrent):
    @nn.compact
    def __call__(self, carry, obs):  # steps from a zero state, whatever the carry holds
        return Recurrent.__call__(self, jnp.zeros_like(carry), obs)


class NormalisesOverAgents(Good):
    @nn.compact
    def __call__(self, carry, obs):  # statistics over the agent axis: another minibatch, other outputs
        return Good.__call__(self, carry, (obs - obs.mean(0)) / (obs.std(0) + 1e-5))


class CarryMeanOverAgents(Recurrent):
    @nn.compact
    def __call__(self, carry, obs):  # every agent's memory pooled with the others'
        return Recurrent.__call__(self, jnp.broadcast_to(carry.mean(0), carry.shape), obs)


class SqueezedValue(Good):
    @nn.compact
    def __call__(self, carry, obs):  # [A, 1] -> [A], but [] for one agent
        x = nn.Dense(16)(obs)
        return carry, nn.Dense(self.action.head_size)(x), nn.Dense(1)(x).squeeze()


class UnrollResets(Recurrent):
    def unroll(self, carry, obs, reset):  # the contract: the carry reset where reset, then a step
        def step(module, carry, inputs):
            obs, reset = inputs
            carry = jnp.where(reset[:, None], module.initial_carry(obs.shape[0]), carry)
            carry, head, value = module(carry, obs)
            return carry, (head, value)

        carry, (head, value) = nn.scan(step, variable_broadcast="params", split_rngs={"params": False})(
            self, carry, (obs, reset))
        return carry, head, value


class UnrollIgnoresReset(UnrollResets):
    def unroll(self, carry, obs, reset):  # carries the episode before into the next: trained on, silently
        return UnrollResets.unroll(self, carry, obs, jnp.zeros_like(reset))


class UnrollForgetsTime(Good):
    def unroll(self, carry, obs, reset):
        T, A = obs.shape[:2]
        return carry, jnp.zeros((A, self.action.head_size)), jnp.zeros((T, A))
'''


@pytest.fixture(scope="module")
def broken(tmp_path_factory):
    """"path:" of a file holding BROKEN's classes."""
    path = tmp_path_factory.mktemp("modules") / "broken.py"
    path.write_text(BROKEN)
    return f"{path}:"


@pytest.mark.parametrize("name, message", [
    ("WrongHead", r"WrongHead\(carry, obs\) must return head \[2, 2\] .* it returned head \[2, 7\] and value \[2\]"),
    ("ValueColumn", r".*; it returned head \[2, 2\] and value \[2, 1\]"),
    ("TwoOutputs", r"TwoOutputs\(carry, obs\) must return \(carry, head \[A, 2\], value \[A\]\)"),
    ("NoCarryArgument", r"NoCarryArgument.init\(key, carry, obs\) failed: TypeError: .*__call__ must be "
                        r"\(self, carry, obs\)"),
    ("Raises", r"Raises.init\(key, carry, obs\) failed at line \d+: RuntimeError: a bug in the step$"),  # where,
    # and no word of __call__'s signature, which was right: was "failed: RuntimeError: ...; __call__ must be ..."
    ("CarryRaises", r"CarryRaises.initial_carry\(2\) failed at line \d+: RuntimeError: a bug in the carry"),
    ("NeedsField", r"NeedsField\(action=...\) failed: TypeError: .*'width'.*give the others defaults"),
    ("CarryWithoutAgents", r"CarryWithoutAgents.initial_carry\(2\) must return arrays \[num_agents, ...\] .*; "
                           r"it returned \[1, 8\]"),
    ("CarryOfTwoAgents", r"CarryOfTwoAgents.initial_carry\(3\) must return arrays \[num_agents, ...\] .*; "
                         r"it returned \{'c': \[2, 8\], 'h': \[3, 8\]\}"),  # 2 agents fit by chance: 3 do not
    ("Missing", r"'.*broken.py' has no 'Missing' \(its flax.linen.Module classes: CarryChangesDtype, .*, Good, .*\)"),
    ("CarryChangesDtype", r"CarryChangesDtype\(carry, obs\) must return a carry of initial_carry's dtypes \(float32; "
                          r".*it returned bfloat16: cast it back"),  # was a scan TypeError traceback in training
    ("IntegerHead", r"IntegerHead\(carry, obs\) must return a float head and value .*; it returned head int32 "
                    r"and value float32"),  # was cast to float32 silently: no gradient, a policy that never learns
    ("CarryListToTuple", r"CarryListToTuple\(carry, obs\) must return a carry of initial_carry's containers "
                         r"\(PyTreeDef\(\[\*, \*\]\)\); it returned PyTreeDef\(\(\*, \*\)\)"),  # was "shaped like"
    ("WithBatchNorm", r"WithBatchNorm\(carry, obs\) failed at line \d+: ScopeCollectionNotFound: .*; jaxlab keeps "
                      r"only the \"params\" collection and passes no RNG: .*nn.LayerNorm"),  # flax's words, no fix
    ("FeedForwardDropsCarry", r"FeedForwardDropsCarry\(carry, obs\) must return a carry shaped like initial_carry's "
                              r"\(\[2, 1\]\); it returned None \(without an initial_carry method the carry is "
                              r"zeros \[A, 1\]: a feed-forward step returns the carry it is given, unchanged\)"),
    ("NoParams", r"NoParams has no parameters \(its init gave no \"params\"\): .*give it a layer"),  # KeyError
])
def test_a_module_breaking_the_contract_is_a_config_error_before_anything_is_built(broken, name, message):
    """The memory estimate, which `resolve` runs before training, measures the module: its errors are
    ConfigErrors (one line, exit 2) naming policy.module, not tracebacks."""
    from jaxlab.config import memory

    config = config_of("cartpole", 2, broken + name)
    with pytest.raises(ConfigError, match=r"^policy.module='.*broken.py:" + name + "': " + message):
        memory.network_size(config.policy, memory.env_shape(config))


@pytest.mark.parametrize("env, words", [
    ("pendulum", "head [2, 1] (action.head_size 1: the Gaussian mean of a continuous action of 1 dims, not logits"),
    ("multicue", "head [2, 12] (action.head_size 12: the logits of MultiDiscrete([3, 4, 5]), one block per component)"),
    ("memory", "head [2, 4] (action.head_size 4: the logits of Discrete(4))")])
def test_a_head_of_the_wrong_size_is_named_with_the_envs_action(broken, env, words):
    """A discrete head of 7 logits on a continuous action was refused with "head [2, 1] (the action head size)",
    which did not say that pendulum's head is a Gaussian mean; on a multi-discrete env the message was built on a
    made-up spec (the memory estimate's MultiDiscrete([10, 1, 1]) for multicue's [3, 4, 5]). It now names the
    env's action space and what the head holds."""
    from jaxlab.config import memory

    config = config_of(env, 2, broken + "WrongHead")
    with pytest.raises(ConfigError) as err:
        memory.network_size(config.policy, memory.env_shape(config))
    assert f"WrongHead(carry, obs) must return {words}" in str(err.value), str(err.value)


def test_a_value_of_the_wrong_shape_is_refused_with_the_fix(broken):
    """A critic's [A, 1] column, or a .squeeze() that gives [] for one agent (a checkpoint trained with many
    envs, then played with one), was refused with the shapes alone; the message now says how to take [A]."""
    import importlib.util

    from jaxlab.agent.custom import ModulePolicy, make_module
    from jaxlab.agent.distributions import ActionSpec
    from jaxlab.config import memory

    config = config_of("cartpole", 2, broken + "ValueColumn")
    with pytest.raises(ConfigError, match=r"it returned head \[2, 2\] and value \[2, 1\]: take the critic's column, "
                                          r"e.g. nn.Dense\(1\)\(x\)\[..., 0\]$"):
        memory.network_size(config.policy, memory.env_shape(config))
    spec = importlib.util.spec_from_file_location("squeezed", broken[:-1])
    source = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(source)
    action = ActionSpec("discrete", (2,))
    policy = ModulePolicy(make_module(source.SqueezedValue, action, 16, "float32"), action)
    policy.init(jax.random.PRNGKey(0), policy.initial_carry(2), np.zeros((2, 4), np.float32), np.ones(2, bool))
    with pytest.raises(ValueError, match=r"and value \[1\]; it returned head \[1, 2\] and value \[\]: .squeeze\(\) "
                                         r"drops the agent axis when there is one agent; take the critic's column"):
        policy.init(jax.random.PRNGKey(0), policy.initial_carry(1), np.zeros((1, 4), np.float32), np.ones(1, bool))


def test_the_command_line_refuses_a_broken_module_in_one_line(broken):
    result = subprocess.run([sys.executable, "-m", "jaxlab.cli", "config", "cartpole", "--policy.module",
                             broken + "WrongHead"], capture_output=True, text=True, timeout=300,
                            env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.startswith("jaxlab config: error: policy.module=") and "must return head [2, 2]" in \
        result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_eval_of_a_run_whose_module_file_was_edited_to_break_the_contract_is_one_line(tmp_path):
    """eval (load_trainer) builds the policy without train's up-front checks: a policy file edited since
    its run so that its step raises, or returns a value [A, 1], ended `jaxlab eval` with a traceback
    (exit 1). The Trainer refuses it as a ConfigError naming policy.module: one line, exit 2."""
    path = tmp_path / "policy.py"
    path.write_text(BROKEN)
    with Trainer(config_of("cartpole", 2, f"{path}:Good")) as trainer:
        trainer.save_checkpoint(tmp_path / "ck")
    line = BROKEN.splitlines().index('        raise RuntimeError("a bug in the step")') + 1
    raises = f"Raises.init(key, carry, obs) failed at line {line}: RuntimeError: a bug in the step"
    for edit, message in (("Raises", raises),
                          ("ValueColumn", "it returned head [2, 2] and value [2, 1]")):
        path.write_text(BROKEN + f"\nGood = {edit}  # edited since the run\n")
        result = subprocess.run([sys.executable, "-m", "jaxlab.cli", "eval", "cartpole", "--checkpoint",
                                 str(tmp_path / "ck"), "--episodes", "2"], capture_output=True, text=True,
                                timeout=300, env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
        assert result.returncode == 2, result.stdout + result.stderr
        assert result.stderr.startswith(f"jaxlab eval: error: policy.module='{path}:Good': ") and message in \
            result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_an_unroll_method_is_checked_at_start(broken):
    """unroll must give what T steps give: carry, head [T, A, k], value [T, A] (it ran only in the first
    update, after the run dir was made)."""
    from jaxlab.config import memory

    good = config_of("cartpole", 2, broken + "Unrolled")
    assert memory.network_size(good.policy, memory.env_shape(good)).params > 0
    config = config_of("cartpole", 2, broken + "UnrollForgetsTime")
    with pytest.raises(ConfigError, match=r"UnrollForgetsTime.unroll\(carry, obs \[T, A, ...\], reset \[T, A\]\) must "
                                          r"return head \[3, 2, 2\] .* it returned head \[2, 2\] and value \[3, 2\]"):
        memory.network_size(config.policy, memory.env_shape(config))


def test_a_policy_file_that_exits_at_import_is_an_error_naming_it(tmp_path):
    """sys.exit in a policy file (a script's main code without the __main__ guard) ended the run with its
    status and no message."""
    path = tmp_path / "script.py"
    path.write_text("import sys\nsys.exit(3)\n")
    with pytest.raises(ConfigError, match=r"policy.module='.*script.py:Policy': importing '.*script.py' called "
                                          r"sys.exit\(3\); .*if __name__ == \"__main__\""):
        Trainer(config_of("cartpole", 2, f"{path}:Policy"))


def test_flags_of_the_built_in_network_warn_that_the_module_ignores_them(tmp_path):
    """--policy.lstm and --policy.mlp-layers do nothing with a module (GRUPolicy declares hidden_size,
    which it gets): one warning line names them. A --config file such as a run dir's config.toml, which
    records every key, names the lines that set one to another value than the defaults (they do nothing
    either), and stays quiet about those at the defaults."""
    from jaxlab.config import to_toml

    def stderr_of(*args):
        result = subprocess.run([sys.executable, "-m", "jaxlab.cli", "config", "memory", *args], capture_output=True,
                                text=True, timeout=300, env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
        assert result.returncode == 0, result.stdout + result.stderr
        return result.stderr

    warned = [line for line in stderr_of("--policy.module", GRU_FILE, "--policy.lstm", "false", "--policy.mlp-layers",
                                         "64", "--policy.hidden-size", "16").splitlines() if "policy.module" in line]
    assert len(warned) == 1 and "--policy.mlp-layers, --policy.lstm do nothing" in warned[0] and "hidden" not in warned[0], warned
    saved = tmp_path / "config.toml"
    saved.write_text(to_toml(config_of("memory", 2, GRU_FILE)))
    assert "policy.module" not in stderr_of("--config", str(saved))
    saved.write_text(to_toml(config_of("memory", 2, GRU_FILE, "--policy.lstm", "false")))
    warned = [line for line in stderr_of("--config", str(saved)).splitlines() if "policy.module" in line]
    assert len(warned) == 1 and warned[0].startswith(f"jaxlab: warning: policy.lstm = false in {saved} does nothing"), \
        warned
    assert warned[0].endswith(f"; drop it (remove that line from {saved})"), warned


def test_ignored_keys_cover_every_policy_key_a_module_does_not_get():
    """Each [policy] key is the built-in network's, given to the module (hidden_size when declared,
    scan_unroll without an unroll of its own), or policy.module itself."""
    import dataclasses

    import flax.linen as nn

    from jaxlab.agent.custom import BUILT_IN_KEYS, ignored_keys
    from jaxlab.config.schema import PolicyConfig

    assert {f.name for f in dataclasses.fields(PolicyConfig)} == {*BUILT_IN_KEYS, "hidden_size", "scan_unroll", "module"}

    class Bare(nn.Module):
        def unroll(self, carry, obs, reset):
            pass

    assert ignored_keys(Bare) == [f"policy.{k}" for k in (*BUILT_IN_KEYS, "hidden_size", "scan_unroll")]


def run_whose_module_moved(tmp_path) -> tuple[Path, Path, Path]:
    """(the run dir, the policy file's first path, its new one) of a short cartpole run trained with
    examples/policies/gru.py copied to tmp_path/project/, the file then moved to tmp_path/moved.py."""
    import shutil

    from jaxlab import cli

    home = tmp_path / "project" / "gru.py"
    home.parent.mkdir()
    shutil.copy(ROOT / "examples" / "policies" / "gru.py", home)
    run = tmp_path / "run"
    flags = [*SMALL, "--train.total-timesteps", "128", "--log.dashboard", "none"]
    assert cli.main(["train", "cartpole", *flags, "--policy.module", f"{home}:GRUPolicy", "--run-dir", str(run)]) == 0
    moved = tmp_path / "moved.py"
    home.rename(moved)
    return run, home, moved


def test_a_moved_module_file_resumes_and_evaluates_from_its_new_path(tmp_path, capsys):
    """Moving the policy file is no change to the network: a resume (--policy.module) or an eval
    (--policy-module) given its new path takes the checkpoint; without it, the missing file is named
    with the flag to pass; another class is refused. Was "no such file" with no way to go on."""
    from jaxlab import checkpoint, cli

    run, home, moved = run_whose_module_moved(tmp_path)
    capsys.readouterr()
    assert cli.main(["eval", "cartpole", "--checkpoint", str(run), "--episodes", "2"]) == 2
    assert (f"the checkpoint's policy.module file {home} does not exist (moved or deleted); restore it there, or "
            f"pass its new path: `jaxlab eval cartpole --checkpoint {run} --policy-module path/to/gru.py:GRUPolicy`"
            in capsys.readouterr().err)
    assert cli.main(["train", "cartpole", "--resume", str(run)]) == 2
    assert f"`jaxlab train cartpole --resume {run} --policy.module path/to/gru.py:GRUPolicy`" in capsys.readouterr().err
    assert cli.main(["eval", "cartpole", "--checkpoint", str(run), "--episodes", "2",
                     "--policy-module", f"{moved}:GRUPolicy"]) == 0
    assert "2 episodes" in capsys.readouterr().out
    assert cli.main(["eval", "cartpole", "--checkpoint", str(run), "--episodes", "2",
                     "--policy-module", f"{moved}:Other"]) == 2
    assert "is not the checkpoint's policy.module" in capsys.readouterr().err
    typo = tmp_path / "nowhere" / "moved.py"  # a new path that does not exist: was "not the checkpoint's"
    assert cli.main(["eval", "cartpole", "--checkpoint", str(run), "--episodes", "2",
                     "--policy-module", f"{typo}:GRUPolicy"]) == 2
    assert f"--policy-module {typo}:GRUPolicy: no such file {typo} (a relative path" in capsys.readouterr().err
    assert cli.main(["train", "cartpole", "--resume", str(run), "--policy.module", f"{typo}:GRUPolicy"]) == 2
    assert f"policy.module='{typo}:GRUPolicy': no such file {typo} (a relative path" in capsys.readouterr().err
    assert cli.main(["train", "cartpole", "--resume", str(run), "--policy.module", f"{moved}:GRUPolicy",
                     "--train.total-timesteps", "256"]) == 0
    assert [p.name for p in checkpoint.step_dirs(run / "checkpoints")][0] == "4"


def test_load_trainer_of_a_run_whose_module_file_moved_names_the_module_argument(tmp_path):
    """load_trainer (and Actor's users) on a run whose policy file moved said only "no such file PATH",
    where `jaxlab eval` names its --policy-module flag: load_trainer's own way, module=, was in no message.
    It now says the file is gone and the call that takes its new path; that call loads it."""
    from jaxlab.config.schema import PolicyModuleError
    from jaxlab.train.evaluation import load_trainer

    run, home, moved = run_whose_module_moved(tmp_path)
    with pytest.raises(PolicyModuleError, match=r"^the checkpoint's policy.module file .*/project/gru.py does not "
                                                r"exist \(moved or deleted\); restore it there, or pass its new path: "
                                                r"load_trainer\('.*/run/checkpoints/2', "
                                                r"module='path/to/gru.py:GRUPolicy'\)$"):
        load_trainer(run)
    with load_trainer(run, module=f"{moved}:GRUPolicy") as trainer:
        assert trainer.config.policy.module == f"{moved}:GRUPolicy"


def test_a_module_returning_nan_at_initialisation_is_named_as_the_cause_not_the_learning_rate(broken, tmp_path):
    """A step that gives NaN from its first call made every loss NaN at update 1, reported with "lower
    train.learning_rate?"; the batch's values show that the policy was NaN before any learning step."""
    from jaxlab.run.loop import train_run

    result = train_run(config_of("cartpole", 2, broken + "NaNValue"), tmp_path / "run")
    assert "became nan at update 1: the policy gave non-finite values (64 of 64 values) while it acted" in \
        result.error and "a policy.module's step returning NaN" in result.error, result.error
    assert result.checkpoint is None


def test_a_nan_continuous_action_from_a_module_is_named_as_the_policys_not_the_envs(broken):
    """A NaN Gaussian mean makes a NaN action, which the env refuses: the error said only that actions
    for 'pendulum' must be finite, as if the user's actions were to blame; it now says the observations
    were finite and the policy itself gave the NaN."""
    from jaxlab.train.rollout import EnvStepError

    with Trainer(config_of("pendulum", 2, broken + "NaNHead")) as trainer, pytest.raises(EnvStepError) as err:
        train_loop(trainer, updates=1)
    assert "has a NaN action" in str(err.value) and "the observations it acted on were finite, so the policy " \
        "itself gave the NaN" in str(err.value), str(err.value)


def test_an_unroll_that_ignores_reset_is_refused_before_training(broken):
    """unroll must reset the carry where reset[t, a]; one that does not gave other sequences than the
    rollout's steps, trained on without a word. The Trainer compares it with stepping on 3 steps."""
    with Trainer(config_of("memory", 2, broken + "UnrollResets")) as trainer:  # the contract kept: accepted
        train_loop(trainer, updates=1)
    with pytest.raises(ConfigError, match=r"^policy.module='.*:UnrollIgnoresReset': UnrollIgnoresReset.unroll\(carry, "
                                          r"obs, reset\) must give what stepping gives .* it differs: its head "
                                          r"\[T, A, k\] by up to .*; reset the carry of agent a before step t"):
        Trainer(config_of("memory", 2, broken + "UnrollIgnoresReset"))


@pytest.mark.parametrize("name, words", [
    ("ForgetsNewCarry", "returns the carry it is given, unchanged: its memory stays initial_carry's in every step"),
    ("ReadsNoCarry", "gives the same carry, head and value for any carry: it reads none of the carry it is given"),
    ("Recurrent", None), ("Good", None)])
def test_a_module_that_ignores_its_carry_gets_a_warning(broken, name, words, capsys):
    """A module declaring initial_carry whose step returned the carry it was given (the new one computed
    and dropped), or stepped from a zero state whatever the carry, trained as a feed-forward policy that
    its author believed had memory, without a word. The Trainer now warns, naming the module; a module
    that uses its carry, or a feed-forward one without initial_carry, gets no warning."""
    Trainer(config_of("memory", 2, broken + name)).close()
    out = capsys.readouterr().out
    if words is None:
        assert "warning" not in out, out
    else:
        assert f"jaxlab: warning: policy.module='{broken}{name}': {name}(carry, obs) {words}" in out, out


@pytest.mark.parametrize("name, parts", [("NormalisesOverAgents", "head and value"),
                                         ("CarryMeanOverAgents", "carry, head and value")])
def test_a_module_mixing_agents_is_refused_before_training(broken, name, parts):
    """A step whose agents' outputs depend on the other agents' inputs (statistics over axis 0, written as
    observation normalisation, or a carry pooled over agents) acted with all agents at once but was trained
    on minibatches of other agents, so its ratios were of outputs it never acted on, without a word."""
    with pytest.raises(ConfigError, match=rf"^policy.module='.*:{name}': {name}\(carry, obs\) must compute each "
                                          rf"agent's outputs from its own observation and carry: agent 0's {parts} "
                                          r"changed when only the other agents' inputs did"):
        Trainer(config_of("memory", 2, broken + name))


def test_a_module_name_of_a_file_in_the_current_directory_is_told_to_give_the_file(tmp_path, monkeypatch):
    """`jaxlab train ENV --policy.module mypolicy:Net` next to mypolicy.py said "No module named 'mypolicy';
    check the module (a package must be on PYTHONPATH)": the `jaxlab` command does not put the current
    directory on sys.path (`python -m jaxlab` does, and then saves a name that evaluates from there alone).
    It now names the file and the spelling that works from anywhere."""
    from jaxlab.agent.custom import load_module_class

    (tmp_path / "mypolicy.py").write_text("import flax.linen as nn\n\nclass Net(nn.Module):\n    pass\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    with pytest.raises(ValueError, match=r"importing 'mypolicy' failed: ModuleNotFoundError: No module named "
                                         r"'mypolicy'; mypolicy.py is in the current directory, which is not on "
                                         r"PYTHONPATH: give the file, \"mypolicy.py:Net\""):
        load_module_class("mypolicy:Net")
    with pytest.raises(ValueError, match=r"No module named 'elsewhere'; check the module \(a package must be on "
                                         r"PYTHONPATH\)$"):  # no such file here: as before
        load_module_class("elsewhere:Net")


def test_a_policy_file_that_raises_at_import_is_named_with_its_line(tmp_path):
    """The error named the exception but not where in the file it was raised, and told a file's author
    to put a package on PYTHONPATH."""
    path = tmp_path / "typo.py"
    path.write_text("import flax.linen as nn\n\nWIDTH = widht * 2\n")
    with pytest.raises(ConfigError, match=r"importing '.*typo.py' failed at line 3: NameError: name 'widht' is not "
                                          r"defined; fix the file$"):
        Trainer(config_of("cartpole", 2, f"{path}:Policy"))


def test_a_resume_takes_built_in_network_keys_a_module_ignores(broken):
    """policy.lstm, encoder, mlp_layers... shape nothing of a module's network (they get a warning that
    they do nothing), but a resume refused them: 'the checkpoint was trained with another policy.lstm'.
    policy.hidden_size, which jaxlab fills into a module declaring it, is still refused there."""
    from jaxlab.train.trainer import check_compatible

    saved = config_of("cartpole", 2)
    changes = check_compatible(saved, config_of("cartpole", 2, GRU_FILE, "--policy.lstm", "false",
                                                "--policy.encoder", "cnn"))
    assert "policy.lstm: true -> false" in changes and 'policy.encoder: "mlp" -> "cnn"' in changes
    with pytest.raises(ConfigError, match=r"cannot resume: the checkpoint was trained with another policy.hidden_size"):
        check_compatible(saved, config_of("cartpole", 2, GRU_FILE, "--policy.hidden-size", "32"))
    good = config_of("cartpole", 2, broken + "Good")  # declares no hidden_size: it shapes nothing there either
    assert "policy.hidden_size: 16 -> 32" in check_compatible(good, config_of("cartpole", 2, broken + "Good",
                                                                            "--policy.hidden-size", "32"))
    with pytest.raises(ConfigError, match=r"another policy.lstm"):  # the built-in network's: still its shape
        check_compatible(load_config("cartpole")[0], load_config("cartpole", flags=["--policy.lstm", "false"])[0])


def test_a_policy_file_imports_its_sibling_modules_from_any_directory(tmp_path, monkeypatch):
    """A policy file importing a module next to it trained when run from its folder, but its checkpoint
    did not evaluate from anywhere else (ModuleNotFoundError), though the file's path is saved absolute
    for that. Its folder is on sys.path while it is imported (and only then)."""
    import sys

    from jaxlab.agent.custom import load_module_class

    project = tmp_path / "project"
    project.mkdir()
    (project / "pol2_sibling_trunk.py").write_text("WIDTH = 16\n")
    (project / "policy.py").write_text(BROKEN + "\nfrom pol2_sibling_trunk import WIDTH\n")
    monkeypatch.chdir(tmp_path)
    assert load_module_class(f"{project}/policy.py:Good").__name__ == "Good"
    assert str(project) not in sys.path


def test_a_checkpoint_resumed_or_played_under_an_edited_policy_file_warns_naming_it(tmp_path):
    """A policy file edited after its checkpoint (the same parameter shapes, another computation) resumed
    without a word, its saved weights then computing something else. A checkpoint records a hash of the
    file and of the modules next to it that it imports; a resume or an eval under other code warns in one
    line naming the file. A checkpoint without the record (an older jaxlab's) resumes without one."""
    import shutil

    from jaxlab import checkpoint
    from jaxlab.train.evaluation import load_trainer

    project = tmp_path / "project"
    project.mkdir()
    policy = project / "gru.py"
    shutil.copy(ROOT / "examples" / "policies" / "gru.py", policy)
    policy.write_text(policy.read_text() + "\nfrom pol3_sibling_scale import SCALE  # noqa: E402\n")
    (project / "pol3_sibling_scale.py").write_text("SCALE = 1.0\n")
    config = config_of("cartpole", 2, f"{policy}:GRUPolicy")
    with Trainer(config) as first:
        train_loop(first, updates=1)
        first.save_checkpoint(tmp_path / "ck")

    def warnings_of_a_resume(meta=None):
        said = []
        with Trainer(config) as second:
            second.load_checkpoint(tmp_path / "ck", meta, warn=said.append)
        return said

    assert warnings_of_a_resume() == []
    policy.write_text(policy.read_text().replace("x = nn.relu(", "x = nn.tanh("))  # the same shapes
    [warning] = warnings_of_a_resume()
    assert warning.startswith(f"warning: the policy.module file {policy} (or a module next to it that it imports) "
                              "changed since the checkpoint (source "), warning
    assert "its weights were trained under the old code and now run under the new one" in warning
    said = []
    load_trainer(tmp_path / "ck", warn=said.append).close()
    assert said == [warning]
    old_meta = {k: v for k, v in checkpoint.read_meta(tmp_path / "ck").items() if k != "policy_source"}
    assert warnings_of_a_resume(old_meta) == []
    policy.write_text(policy.read_text().replace("x = nn.tanh(", "x = nn.relu("))  # back: the sibling alone edited
    (project / "pol3_sibling_scale.py").write_text("SCALE = 2.0\n")
    assert len(warnings_of_a_resume()) == 1


def test_a_config_files_relative_policy_file_is_taken_against_the_files_folder(tmp_path, monkeypatch):
    """policy.module = "policies/gru.py:GRUPolicy" in a --config file was taken against the current directory:
    the same file trained from its own folder and said "no such file" from anywhere else. It is the file's
    folder's path now (a flag's stays against the current directory), saved absolute, so a run trained from one
    directory resumes with the same --config from another."""
    import shutil

    from jaxlab import checkpoint, cli
    from jaxlab.config import config_from_toml, to_toml

    project = tmp_path / "project"
    (project / "policies").mkdir(parents=True)
    shutil.copy(ROOT / "examples" / "policies" / "gru.py", project / "policies" / "gru.py")
    conf = project / "small.toml"
    conf.write_text('[policy]\nmodule = "policies/gru.py:GRUPolicy"\nhidden_size = 16\n\n[vec]\nnum_envs = 8\n\n'
                    '[train]\nbptt_horizon = 8\nminibatch_size = 16\ntotal_timesteps = 128\n\n[log]\ndashboard = "none"\n')
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    config, _ = load_config("cartpole", config_file=conf)
    assert config.policy.module == f"{project}/policies/gru.py:GRUPolicy"
    assert config_from_toml(to_toml(config)).policy.module == config.policy.module  # as the run saves it
    flag, _ = load_config("cartpole", config_file=conf, flags=["--policy.module", "policies/gru.py:GRUPolicy"])
    assert flag.policy.module == f"{elsewhere}/policies/gru.py:GRUPolicy"
    monkeypatch.chdir(tmp_path)  # a relative --config path: its folder is the file's, not the current one
    assert load_config("cartpole", config_file="project/small.toml")[0].policy.module == config.policy.module
    run = tmp_path / "run"
    assert cli.main(["train", "cartpole", "--config", "project/small.toml", "--run-dir", str(run)]) == 0
    monkeypatch.chdir(elsewhere)
    assert cli.main(["train", "cartpole", "--resume", str(run), "--config", str(conf),
                     "--train.total-timesteps", "256"]) == 0
    assert [p.name for p in checkpoint.step_dirs(run / "checkpoints")][0] == "4"


def test_a_resume_whose_policy_file_no_longer_imports_names_the_import(tmp_path):
    """A run's policy file whose import broke since (a package it imports is gone) got, at --resume, the
    suffix for a saved value a flag may change: "(--resume RUN: the values not given as flags are the ones
    the run was saved with ...)", though no value is wrong and no flag fixes it; and the fix said to check
    "the module", not the package the file imports. Nothing of the run is touched."""
    import shutil

    from jaxlab import checkpoint, cli

    policy = tmp_path / "gru.py"
    shutil.copy(ROOT / "examples" / "policies" / "gru.py", policy)
    run = tmp_path / "run"
    flags = [*SMALL, "--train.total-timesteps", "128", "--log.dashboard", "none"]
    assert cli.main(["train", "cartpole", *flags, "--policy.module", f"{policy}:GRUPolicy", "--run-dir", str(run)]) == 0
    policy.write_text(policy.read_text().replace("import jax.numpy as jnp\n",
                                                 "import jax.numpy as jnp\nimport gru_helpers_not_installed\n", 1))
    line = policy.read_text().splitlines().index("import gru_helpers_not_installed") + 1
    metrics = (run / "metrics.jsonl").read_text()
    result = subprocess.run([sys.executable, "-m", "jaxlab.cli", "train", "cartpole", "--resume", str(run),
                             "--train.total-timesteps", "256"], capture_output=True, text=True, timeout=300,
                            env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})  # this process has it imported
    assert result.returncode == 2 and result.stderr == (
        f"jaxlab train: error: policy.module='{policy}:GRUPolicy': importing '{policy}' failed at line {line}: "
        "ModuleNotFoundError: No module named 'gru_helpers_not_installed'; "
        f"'{policy}' imports 'gru_helpers_not_installed', which Python cannot find here: install it, or put it on "
        "PYTHONPATH\n")
    assert [p.name for p in checkpoint.step_dirs(run / "checkpoints")][0] == "2"
    assert (run / "metrics.jsonl").read_text() == metrics

"""Your own policy network: ``policy.module = "package.module:Class"`` (or ``"path/to/file.py:Class"``)
trains a Flax module of yours in place of the built-in ActorCritic, through the same rollout, update,
checkpoints and eval.

The contract (examples/policies/gru.py is a complete one). Your class is a ``flax.linen.Module``:

    class MyPolicy(nn.Module):
        action: ActionSpec      # jaxlab fills these fields when your class declares them:
        hidden_size: int = 64   #   action (jaxlab.agent.distributions.ActionSpec: kind, nvec, dim,
        dtype: str = "float32"  #   head_size), hidden_size (policy.hidden_size), dtype (device.precision)
                                # (always: these defaults are never used; hidden_size is policy.hidden_size,
                                # 128 unless set, whatever the class says)

        def initial_carry(self, num_agents: int):
            # optional: the carry an episode starts from, a pytree of arrays [num_agents, ...]
            # (default: zeros [num_agents, 1], for a feed-forward module). Called on the unbound module.
            return jnp.zeros((num_agents, self.hidden_size))

        def __call__(self, carry, obs):
            # one step of A agents: obs [A, ...] as the env gives them (uint8 pixels stay uint8, not divided
            # by 255; observations are normalised first, as float32, when train.obs_norm is on: auto turns
            # it on for float observations and for uint8 of one dimension, codes)
            return carry, head, value   # head [A, action.head_size], value [A]: floats (cast to float32)

    head is the actor's output: logits for discrete actions (the sum of the factors' sizes for
    multi-discrete, masked by jaxlab where the env has masks), the Gaussian mean for continuous ones
    (jaxlab adds the learned state-independent log-std, param "log_std"). value is the critic's.

Each agent's outputs must depend on its own observation and carry only (no statistics, pooling or attention
over the agent axis): the update trains agents in minibatches of other agents than those that acted together
(checked at start: ModulePolicy.check_agents_apart).

A step that ignores the carry initial_carry declares (returns the carry it was given, or gives the same
outputs for any carry: ModulePolicy.carry_unused) gets a warning at start: it has no memory.

jaxlab resets the carry itself: before a step, the carry of every agent whose previous step ended an
episode is replaced by initial_carry's. For training it unrolls your step over T steps with a
lax.scan (resetting the same way); a module may define ``unroll(self, carry, obs [T, A, ...], reset
[T, A] bool) -> carry, head [T, A, k], value [T, A]`` instead (a faster equivalent: it must reset the
carry of agent a before step t where reset[t, a], and give what stepping gives: the Trainer compares
them on 3 steps, ModulePolicy.check_unroll). Only the "params" collection is used (no batch
statistics, no dropout RNG).

Params: {"module": your module's variables, "log_std": [d] for continuous actions}, saved in
checkpoints like the built-in ones.
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import importlib
import importlib.util
import inspect
import sys
import traceback
import zlib
from pathlib import Path

import jax
import jax.numpy as jnp

from jaxlab.agent.distributions import ActionSpec

#: Fields jaxlab fills when the user's class declares them: field -> what it gets.
FILLED_FIELDS = ("action", "hidden_size", "dtype")

#: The [policy] keys of the built-in network, which a user's module replaces (jaxlab.train.build).
BUILT_IN_KEYS = ("encoder", "mlp_layers", "activation", "cnn_channels", "cnn_kernels", "cnn_strides", "lstm",
                 "shared_trunk", "actor_init_scale", "critic_init_scale")


def module_file(spec: str) -> Path | None:
    """The file a policy.module ``spec`` names ("path/to/file.py:Class"), or None (a package's module)."""
    where = spec.partition(":")[0]
    return Path(where).expanduser() if where.endswith(".py") else None


def missing_file_words(spec: str) -> str | None:
    """"no such file PATH (...)" when the policy.module ``spec`` names a .py file that does not exist (a
    relative path is taken from the current directory), else None."""
    path = module_file(spec) if spec else None
    if path is None or path.is_file():
        return None
    return f"no such file {path.absolute()} (a relative path is taken from the current directory, {Path.cwd()})"


def gone_file_words(spec: str, how_to_pass) -> str | None:
    """"the checkpoint's policy.module file PATH does not exist (...); restore it there, or pass its new path:
    HOW" when the file of ``spec`` (a checkpoint's policy.module) is gone, else None; HOW is
    ``how_to_pass("path/to/FILE.py:Class")``: the command, or the call, that takes the new path."""
    path = module_file(spec) if spec else None
    if path is None or path.is_file():
        return None
    new = f"path/to/{path.name}:{spec.partition(':')[2]}"
    return (f"the checkpoint's policy.module file {path} does not exist (moved or deleted); restore it there, or "
            f"pass its new path: {how_to_pass(new)}")


def moved_module(saved: str, now: str) -> bool:
    """Whether policy.module ``now`` is ``saved``'s class, in a file moved or copied elsewhere (or the
    same): the same class, and the saved file gone or of the same contents. (A checkpoint's arrays are
    then checked against the module's, shape by shape, as they are restored.)"""
    old, new = module_file(saved), module_file(now)
    if saved == now:
        return True
    if old is None or new is None or saved.partition(":")[2] != now.partition(":")[2] or not new.is_file():
        return False
    return not old.is_file() or old.read_bytes() == new.read_bytes()


def module_source(spec: str) -> dict | None:
    """What identifies the code of the policy.module ``spec``: {"file": its module's file (absolute),
    "source_hash": the SHA-256 of that file's contents and of the sibling modules it imports
    (sibling_imports), each sibling by its name: moved with them, they keep their hash}; None when no
    file is found (a package's module that cannot be found, or one without a file). A checkpoint records
    it: a resume warns when it changed (jaxlab.train.trainer.policy_source_change)."""
    path = module_file(spec)
    if path is None:
        try:
            found = importlib.util.find_spec(spec.partition(":")[0])
        except (ImportError, ValueError):
            found = None
        path = Path(found.origin) if found is not None and found.has_location and found.origin else None
    if path is None or not path.is_file():
        return None
    path = path.absolute()
    digest = hashlib.sha256(path.read_bytes() + b"\0")
    for sibling in sibling_imports(path):
        digest.update(sibling.name.encode() + b"\0" + sibling.read_bytes() + b"\0")
    return {"file": str(path), "source_hash": digest.hexdigest()}


def sibling_imports(path: Path) -> list[Path]:
    """The modules next to the Python file ``path`` (NAME.py in its folder) that it imports (``import
    NAME``, ``from NAME import ...``, ``from .NAME import ...``, ``from . import NAME``), and those they
    import in turn; sorted. Only import statements are read (not importlib.import_module's names), and
    a sibling package (a folder) is not followed."""
    found, todo = set(), [path]
    while todo:
        try:
            tree = ast.parse(todo.pop().read_bytes())
        except (SyntaxError, ValueError, OSError):  # its import reports it
            continue
        for name in _imported_names(tree):
            sibling = path.parent / f"{name}.py"
            if sibling != path and sibling not in found and sibling.is_file():
                found.add(sibling)
                todo.append(sibling)
    return sorted(found)


def _imported_names(tree: ast.AST) -> set[str]:
    """The top-level module names a module's ``tree`` imports, absolutely or relatively to its own package
    (``from . import NAME`` gives NAME)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level <= 1:
            if node.module:
                names.add(node.module.split(".")[0])
            elif node.level == 1:
                names.update(alias.name for alias in node.names)
    return names


def load_module_class(spec: str) -> type:
    """The class that ``spec`` ("package.module:Class" or "path/to/file.py:Class") names; ValueError with
    what went wrong and a fix."""
    where, sep, name = spec.partition(":")
    if not sep or not where or not name:
        raise ValueError(f"policy.module={spec!r} must name a class: \"package.module:Class\" or "
                         "\"path/to/file.py:Class\"")
    try:
        if where.endswith(".py"):
            path = Path(where).expanduser()
            if not path.is_file():
                raise ValueError(f"policy.module={spec!r}: no such file {str(path)!r}")
            module_name = f"jaxlab_user_policy_{path.stem}_{zlib.crc32(str(path.absolute()).encode()):08x}"
            module = sys.modules.get(module_name)
            if module is None:
                module = _import_file(module_name, path)
        elif "/" in where:  # a path, but not to a .py file: import_module would say "No module named '/...'"
            raise ValueError(f"policy.module={spec!r}: {where!r} is a path but not to a .py file; give the file, "
                             f"e.g. \"{where}.py:{name}\"")
        else:
            module = importlib.import_module(where)
    except ValueError:
        raise
    except SystemExit as err:  # a script's code run at import: it would end jaxlab with its status, silently
        raise ValueError(f"policy.module={spec!r}: importing {where!r} called sys.exit({err.code!r}); keep a "
                         "script's code under `if __name__ == \"__main__\":`") from None
    except Exception as err:  # noqa: BLE001 - the user's code may raise anything while importing
        path = module_file(spec)
        raise ValueError(f"policy.module={spec!r}: importing {where!r} failed{_line_in(err, path)}: "
                         f"{type(err).__name__}: {err}; {_import_fix(err, where, path, name)}") from None
    import flax.linen as nn

    cls = getattr(module, name, None)
    if cls is None:
        classes = sorted(k for k, v in vars(module).items()
                         if isinstance(v, type) and issubclass(v, nn.Module) and v.__module__ == module.__name__)
        has = f"its flax.linen.Module classes: {', '.join(classes)}" if classes else "it defines no flax.linen.Module"
        raise ValueError(f"policy.module={spec!r}: {where!r} has no {name!r} ({has})")

    if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
        raise ValueError(f"policy.module={spec!r}: {name} is not a flax.linen.Module class")
    return cls


def _import_fix(err: Exception, where: str, path: Path | None, name: str) -> str:
    """The fix for ``err``, raised importing the module ``where`` (the file ``path``, or None for a package's
    module) for its class ``name``: a module it imports that Python cannot find is named as such, not as the
    policy's own; a module name that is a file of the current directory (not on sys.path for the `jaxlab`
    command) is to be given as that file."""
    missing = err.name if isinstance(err, ModuleNotFoundError) else None
    if missing and (path is not None or (missing != where and not where.startswith(f"{missing}."))):
        return f"{where!r} imports {missing!r}, which Python cannot find here: install it, or put it on PYTHONPATH"
    here = Path(*where.split(".")).with_suffix(".py")
    if missing and path is None and here.is_file():
        return (f"{here} is in the current directory, which is not on PYTHONPATH: give the file, \"{here}:{name}\" "
                "(saved absolute in the run's config, so its checkpoints evaluate from anywhere)")
    if path is not None and not isinstance(err, ImportError):
        return "fix the file"
    return "check the module (a package must be on PYTHONPATH)"


def _import_file(module_name: str, path: Path):
    """The module of the Python file ``path``, imported as ``module_name`` with the file's folder on
    sys.path meanwhile (last, so that it shadows nothing installed): a sibling module it imports is found
    from any directory, as when it is run from its own (a checkpoint evaluates from anywhere)."""
    loader = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(loader)
    sys.modules[module_name] = module
    folder = str(path.absolute().parent)
    added = folder not in sys.path
    if added:
        sys.path.append(folder)
    try:
        loader.loader.exec_module(module)
    except BaseException:
        del sys.modules[module_name]
        raise
    finally:
        if added:
            sys.path.remove(folder)
    return module


def _line_in(err: BaseException, path: Path | None) -> str:
    """" at line N": where in the user's file ``path`` its import raised ``err`` (the innermost frame
    there; a SyntaxError's own line), or "" for a package's module or a frame elsewhere."""
    if path is None:
        return ""
    name = str(path.absolute())
    if isinstance(err, SyntaxError) and err.filename == name and err.lineno:
        return f" at line {err.lineno}"
    lines = [frame.lineno for frame in traceback.extract_tb(err.__traceback__) if frame.filename == name]
    return f" at line {lines[-1]}" if lines else ""


def make_module(cls: type, action: ActionSpec, hidden_size: int, dtype: str):
    """An instance of the user's class with the FILLED_FIELDS it declares; ValueError naming the class
    when it cannot be made that way (a field jaxlab does not fill has no default, or its __post_init__
    raises)."""
    given = {"action": action, "hidden_size": hidden_size, "dtype": dtype}
    names = {f.name for f in dataclasses.fields(cls)}
    filled = {k: v for k, v in given.items() if k in names}
    try:
        return cls(**filled)
    except Exception as err:  # noqa: BLE001 - the user's class may raise anything
        raise ValueError(f"{cls.__name__}({', '.join(f'{k}=...' for k in filled)}) failed: {type(err).__name__}: "
                         f"{err}; jaxlab fills only the fields {', '.join(FILLED_FIELDS)}: give the others "
                         "defaults") from None


def ignored_keys(cls: type) -> list[str]:
    """The [policy] keys ("policy.lstm", ...) that do nothing with a module of class ``cls``: the built-in
    network's, hidden_size when the class declares no such field (jaxlab fills it only then), and
    scan_unroll when it has its own unroll (the lax.scan it sets is not used)."""
    keys = list(BUILT_IN_KEYS)
    if "hidden_size" not in {f.name for f in dataclasses.fields(cls)}:
        keys.append("hidden_size")
    if hasattr(cls, "unroll"):
        keys.append("scan_unroll")
    return [f"policy.{key}" for key in keys]


def _line_in_module(err: BaseException, module) -> str:
    """" at line N": where in the file of ``module``'s class its code raised ``err`` (_line_in), or "" when
    no frame of that file is in the traceback (the error is flax's or jax's, raised calling it)."""
    try:
        path = Path(inspect.getfile(type(module)))
    except (TypeError, OSError):  # a class without a file
        return ""
    return _line_in(err, path)


def _collections_hint(err: Exception) -> str:
    """A fix for a step that needs more than the "params" collection (flax's error for a BatchNorm's
    batch_stats or a Dropout's RNG), else ""."""
    if type(err).__name__ not in ("ScopeCollectionNotFound", "InvalidRngError"):
        return ""
    return ("; jaxlab keeps only the \"params\" collection and passes no RNG: no BatchNorm statistics or "
            "Dropout (use nn.LayerNorm, or BatchNorm(use_running_average=True) and Dropout(deterministic=True))")


def head_words(action: ActionSpec) -> str:
    """What the head's last axis of ``action.head_size`` holds, for errors: "action.head_size 4: the logits of
    Discrete(4)", "... the Gaussian mean of a continuous action of 1 dims", ..."""
    if action.kind == "continuous":
        what = (f"the Gaussian mean of a continuous action of {action.dim} dims, not logits (jaxlab adds the "
                "log-std)")
    elif action.kind == "discrete":
        what = f"the logits of Discrete({action.nvec[0]})"
    else:
        what = f"the logits of MultiDiscrete({list(action.nvec)}), one block per component"
    return f"action.head_size {action.head_size}: {what}"


def _value_fix(shape: tuple, lead: tuple) -> str:
    """A fix for a value of ``shape`` where [*lead] is due: a critic's column [*lead, 1] left as it is, or a
    squeeze that dropped the agent axis of one agent (or of a step of one); "" for another shape."""
    if shape == (*lead, 1):
        return ": take the critic's column, e.g. nn.Dense(1)(x)[..., 0]"
    if len(shape) < len(lead) and 1 in lead and shape == tuple(n for n in lead if n != 1):
        return (": .squeeze() drops the agent axis when there is one agent; take the critic's column, e.g. "
                "nn.Dense(1)(x)[..., 0]")
    return ""


def _reset(carry, initial, reset: jax.Array):
    """``carry`` with the entries of agents where ``reset`` [A] replaced by ``initial``'s."""
    return jax.tree.map(lambda c, i: jnp.where(reset.reshape(reset.shape + (1,) * (c.ndim - 1)), i, c),
                        carry, initial)


def _random_like(key: jax.Array, like) -> jax.Array:
    """Random values of ``like``'s shape and dtype: integers in [0, 256) (uint8 pixels), booleans, or
    standard normal floats."""
    if jnp.issubdtype(like.dtype, jnp.bool_):
        return jax.random.bernoulli(key, 0.5, like.shape)
    if jnp.issubdtype(like.dtype, jnp.integer):
        return jax.random.randint(key, like.shape, 0, 256).astype(like.dtype)
    return jax.random.normal(key, like.shape).astype(like.dtype)


class ModulePolicy:
    """The built-in ActorCritic's interface (init, apply with method None or "unroll", initial_carry; see
    jaxlab.agent.policy) over a user's module that follows the contract above."""

    def __init__(self, module, action: ActionSpec, scan_unroll: int = 1):
        self.module, self.action, self.scan_unroll = module, action, scan_unroll

    def initial_carry(self, num_agents: int):
        """The module's initial_carry(num_agents) (zeros [num_agents, 1] without one); ValueError naming
        the class when it raises or a leaf lacks the leading axis of num_agents (jaxlab resets, stores
        and shards the carry per agent: a carry of another size would be broadcast, one shared by all)."""
        if not hasattr(self.module, "initial_carry"):
            return jnp.zeros((num_agents, 1), jnp.float32)
        what = f"{type(self.module).__name__}.initial_carry({num_agents})"
        try:
            carry = self.module.initial_carry(num_agents)
        except Exception as err:  # noqa: BLE001 - the user's code may raise anything
            raise ValueError(f"{what} failed{_line_in_module(err, self.module)}: {type(err).__name__}: "
                             f"{err}") from None
        if any(jnp.shape(x)[:1] != (num_agents,) for x in jax.tree.leaves(carry)):
            raise ValueError(f"{what} must return arrays [num_agents, ...] (one carry per agent, e.g. jnp.zeros("
                             f"(num_agents, 64))); it returned {jax.tree.map(lambda x: list(jnp.shape(x)), carry)}")
        return carry

    def init(self, key: jax.Array, carry, obs: jax.Array, reset: jax.Array) -> dict:
        """Params for ``obs`` [A, ...]; ValueError when the module's init fails or its outputs break the
        contract."""
        try:
            variables = self.module.init(key, carry, obs)
        except Exception as err:  # noqa: BLE001 - the user's code may raise anything
            where = _line_in_module(err, self.module)  # none: the call itself failed, as with another signature
            fix = "" if where else "; __call__ must be (self, carry, obs) -> (carry, head, value)"
            raise ValueError(f"{type(self.module).__name__}.init(key, carry, obs) failed{where}: "
                             f"{type(err).__name__}: {err}{fix}") from None
        if not variables.get("params"):
            raise ValueError(f"{type(self.module).__name__} has no parameters (its init gave no \"params\"): "
                             "jaxlab trains them; give it a layer, e.g. nn.Dense, under @nn.compact or in setup")
        params = {"module": {"params": variables["params"]}}
        if self.action.kind == "continuous":
            params["log_std"] = jnp.zeros((self.action.dim,), jnp.float32)
        self._check(params, carry, obs)
        return params

    def _check(self, params, carry, obs) -> None:
        """ValueError naming the class when one step on ``obs`` [A, ...] or, when the module defines
        unroll, T = A + 1 steps (a T unlike A) break the contract: jax.eval_shape, nothing is computed."""
        A = obs.shape[0]
        name = type(self.module).__name__
        try:
            out = jax.eval_shape(lambda p, c, o: self.module.apply(p, c, o), params["module"], carry, obs)
        except Exception as err:  # noqa: BLE001
            raise ValueError(f"{name}(carry, obs) failed{_line_in_module(err, self.module)}: "
                             f"{type(err).__name__}: {err}{_collections_hint(err)}") from None
        self._check_outputs(f"{name}(carry, obs)", out, carry, (A,))
        if hasattr(self.module, "unroll"):
            what, T = f"{name}.unroll(carry, obs [T, A, ...], reset [T, A])", A + 1
            sequence, reset = jax.ShapeDtypeStruct((T, *obs.shape), obs.dtype), jax.ShapeDtypeStruct((T, A), bool)
            try:
                out = jax.eval_shape(lambda p, c, o, r: self.module.apply(p, c, o, r, method="unroll"),
                                     params["module"], carry, sequence, reset)
            except Exception as err:  # noqa: BLE001
                raise ValueError(f"{what} failed{_line_in_module(err, self.module)}: {type(err).__name__}: "
                                 f"{err}") from None
            self._check_outputs(what, out, carry, (T, A))

    def _check_outputs(self, what: str, out, carry, lead: tuple) -> None:
        """ValueError unless ``out`` is (a carry shaped like ``carry``, of its dtypes, head [*lead, k], value
        [*lead], both of a float dtype)."""
        k = self.action.head_size
        axes = "T, A" if len(lead) == 2 else "A"
        if not (isinstance(out, tuple) and len(out) == 3):
            raise ValueError(f"{what} must return (carry, head [{axes}, {k}], value [{axes}]); it returned "
                             f"{type(out).__name__} {jax.tree.map(lambda x: x.shape, out)}")
        new_carry, head, value = out
        if head.shape != (*lead, k) or value.shape != lead:
            raise ValueError(f"{what} must return head {[*lead, k]} ({head_words(self.action)}) and value "
                             f"{list(lead)}; it returned head {list(head.shape)} and value {list(value.shape)}"
                             f"{_value_fix(value.shape, lead)}")
        if not (jnp.issubdtype(head.dtype, jnp.floating) and jnp.issubdtype(value.dtype, jnp.floating)):
            raise ValueError(f"{what} must return a float head and value (they are cast to float32 and "
                             f"differentiated); it returned head {head.dtype} and value {value.dtype}: drop the "
                             "cast to an integer or complex type")
        before, after = jax.tree.structure(carry), jax.tree.structure(new_carry)
        if before != after and before.num_leaves == after.num_leaves:  # the same arrays, other containers
            raise ValueError(f"{what} must return a carry of initial_carry's containers ({before}); it returned "
                             f"{after}: return the same types (a list stays a list, a dict keeps its keys)")
        if before != after or any(
                a.shape != b.shape for a, b in zip(jax.tree.leaves(new_carry), jax.tree.leaves(carry))):
            fix = "" if hasattr(self.module, "initial_carry") else (
                " (without an initial_carry method the carry is zeros [A, 1]: a feed-forward step returns the "
                "carry it is given, unchanged)")
            raise ValueError(f"{what} must return a carry shaped like initial_carry's "
                             f"({jax.tree.map(lambda x: list(x.shape), carry)}); it returned "
                             f"{jax.tree.map(lambda x: list(x.shape), new_carry)}{fix}")
        if any(a.dtype != b.dtype for a, b in zip(jax.tree.leaves(new_carry), jax.tree.leaves(carry))):
            def dtypes(tree):
                return jax.tree.map(lambda x: str(x.dtype), tree)

            raise ValueError(f"{what} must return a carry of initial_carry's dtypes ({dtypes(carry)}; the "
                             f"rollout keeps it in buffers of those); it returned {dtypes(new_carry)}: cast it "
                             f"back, e.g. .astype(jnp.float32), or make initial_carry's of the dtype it returns")

    def check_unroll(self, params, obs_shape: tuple, obs_dtype) -> None:
        """ValueError naming the class when its own unroll does not give what stepping gives
        (unroll_mismatch): an unroll that ignores reset trained every sequence on carries of the
        episode before, without a word."""
        mismatch = self.unroll_mismatch(params, obs_shape, obs_dtype)
        if mismatch:
            raise ValueError(f"{type(self.module).__name__}.unroll(carry, obs, reset) must give what stepping gives "
                             "(__call__, the carry reset to initial_carry's where reset[t, a]); on 3 steps of 2 "
                             f"agents, agent 0 reset before the last, it differs: {mismatch}; reset the carry of "
                             "agent a before step t where reset[t, a] (or drop unroll)")

    def unroll_mismatch(self, params, obs_shape: tuple, obs_dtype) -> str | None:
        """None, or words saying where the module's own unroll does not give what stepping gives (its
        __call__ under a lax.scan, the carry reset to initial_carry's where reset): run on T = 3 steps of
        A = 2 agents of random observations [T, A, *obs_shape], agent 0 reset before the last step. A part
        (head, value, carry) differs when its largest difference exceeds 5% of its largest magnitude
        (float rounding, bfloat16 included, stays far under that). None without an unroll."""
        if not hasattr(self.module, "unroll"):
            return None
        T, A, key = 3, 2, jax.random.PRNGKey(0)
        obs = _random_like(key, jax.ShapeDtypeStruct((T, A, *obs_shape), obs_dtype))
        reset = jnp.zeros((T, A), bool).at[T - 1, 0].set(True)

        def largest_differences(params, carry):  # per part (head, value, carry): (max |a - b|, max |b|) per leaf
            unrolled = self.apply(params, carry, obs, reset, method="unroll")[:3]
            stepped = self._scan_steps(params, carry, obs, reset)
            return [[(jnp.max(jnp.abs(a.astype(jnp.float32) - b.astype(jnp.float32))), jnp.max(jnp.abs(b)))
                     for a, b in zip(jax.tree.leaves(mine), jax.tree.leaves(scanned))]
                    for mine, scanned in zip(unrolled[1:] + unrolled[:1], stepped[1:] + stepped[:1])]

        found = jax.jit(largest_differences)(params, self.initial_carry(A))
        differ = [f"its {part} by up to {max(float(d) for d, _ in pairs):.3g}"
                  for part, pairs in zip(("head [T, A, k]", "value [T, A]", "carry"), found)
                  if any(float(d) > 0.05 * float(m) + 1e-6 for d, m in pairs)]
        return ", ".join(differ) or None

    def check_agents_apart(self, params, obs_shape: tuple, obs_dtype) -> None:
        """ValueError naming the class when an agent's step outputs (carry, head, value) depend on the other
        agents' observations or carries (a mean over the agent axis, attention across agents): the update
        steps agents in minibatches of other agents than the rollout's, so such a step trains on outputs
        unlike those it acted with. Run on A = 3 agents of random observations and carries, agents 1 and 2
        then given others: agent 0's outputs must stay within float rounding (1e-3 of their magnitude)."""
        A, keys = 3, jax.random.split(jax.random.PRNGKey(1), 4)

        def random_inputs(obs_key, carry_key):
            obs = _random_like(obs_key, jax.ShapeDtypeStruct((A, *obs_shape), obs_dtype))
            return obs, jax.tree.map(lambda x: _random_like(carry_key, x), self.initial_carry(A))

        (obs, carry), (other_obs, other_carry) = random_inputs(*keys[:2]), random_inputs(*keys[2:])

        def largest_differences(mine, theirs):  # per leaf: (max |a - b|, max |b|) over agent 0's entries
            return [(jnp.max(jnp.abs(a[0].astype(jnp.float32) - b[0].astype(jnp.float32))),
                     jnp.max(jnp.abs(b[0].astype(jnp.float32)))) for a, b in zip(mine, theirs)]

        def agent_zero(params, obs, carry):  # per part (carry, head, value): largest_differences
            out = self.module.apply(params["module"], carry, obs)
            mixed = self.module.apply(params["module"], jax.tree.map(lambda c, o: c.at[1:].set(o[1:]), carry,
                                                                     other_carry), obs.at[1:].set(other_obs[1:]))
            return [largest_differences(jax.tree.leaves(x), jax.tree.leaves(y)) for x, y in zip(mixed, out)]

        found = jax.jit(agent_zero)(params, obs, carry)
        differ = [part for part, pairs in zip(("carry", "head", "value"), found)
                  if any(float(d) > 1e-3 * float(m) + 1e-6 for d, m in pairs)]
        if differ:
            parts = " and ".join([", ".join(differ[:-1]), differ[-1]] if len(differ) > 1 else differ)
            raise ValueError(f"{type(self.module).__name__}(carry, obs) must compute each agent's outputs from its "
                             f"own observation and carry: agent 0's {parts} changed when only the "
                             "other agents' inputs did (a mean, norm or attention over the agent axis, axis 0); "
                             "jaxlab trains agents in minibatches of other agents than those it acted with, so such "
                             "a step trains on outputs it never acted on: reduce over feature axes only (e.g. "
                             "nn.LayerNorm, or train.obs_norm for observation statistics)")

    def carry_unused(self, params, obs_shape: tuple, obs_dtype) -> str | None:
        """None, or words saying how the module's step ignores the carry its initial_carry declares: it returns
        the carry it was given, unchanged (its memory stays initial_carry's in every step), or its outputs
        (carry, head, value) are the same for two carries (it reads none of it). Run on A = 2 agents of random
        observations [A, *obs_shape] and random carries of initial_carry's shapes and dtypes. None without
        an initial_carry method (the default carry is a placeholder a feed-forward step passes on)."""
        if not hasattr(self.module, "initial_carry"):
            return None
        A, keys = 2, jax.random.split(jax.random.PRNGKey(0), 3)
        obs = _random_like(keys[0], jax.ShapeDtypeStruct((A, *obs_shape), obs_dtype))
        first, second = (jax.tree.map(lambda x, k=k: _random_like(k, x), self.initial_carry(A)) for k in keys[1:])

        def equal(a, b):
            return all(bool(jnp.array_equal(x, y)) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))

        step = jax.jit(lambda p, c: self.module.apply(p["module"], c, obs))
        out_first, out_second = step(params, first), step(params, second)
        name = type(self.module).__name__
        if equal(out_first[0], first):
            return (f"{name}(carry, obs) returns the carry it is given, unchanged: its memory stays "
                    "initial_carry's in every step; return the new carry (e.g. `h, _ = cell(carry, x); return h, "
                    "head, value`), or drop initial_carry for a feed-forward module")
        if equal(out_first, out_second):
            return (f"{name}(carry, obs) gives the same carry, head and value for any carry: it reads none of "
                    "the carry it is given; compute the step from `carry` (not a new zero state), or drop "
                    "initial_carry for a feed-forward module")
        return None

    def _scan_steps(self, params, carry, obs, reset):
        """(carry, head [T, A, k], value [T, A]): __call__ over T steps by a lax.scan, resetting the carry
        of agent a to initial_carry's before step t where reset [T, A]."""
        def step(c, inputs):
            c, head, value = self._step(params, c, *inputs)
            return c, (head, value)

        carry, (head, value) = jax.lax.scan(step, carry, (obs, reset), unroll=self.scan_unroll)
        return carry, head, value

    def _step(self, params, carry, obs, reset):
        carry = _reset(carry, self.initial_carry(obs.shape[0]), reset)
        carry, head, value = self.module.apply(params["module"], carry, obs)
        return carry, head.astype(jnp.float32), value.astype(jnp.float32)

    def apply(self, params, carry, obs: jax.Array, reset: jax.Array, method=None):
        """(carry, head, value, log_std or None): one step (obs [A, ...], reset [A]) or, with method
        "unroll", T steps (obs [T, A, ...], reset [T, A])."""
        log_std = params.get("log_std")
        if method == "unroll":
            if hasattr(self.module, "unroll"):
                carry, head, value = self.module.apply(params["module"], carry, obs, reset, method="unroll")
                head, value = head.astype(jnp.float32), value.astype(jnp.float32)
            else:
                carry, head, value = self._scan_steps(params, carry, obs, reset)
            return carry, head, value, log_std
        if method is not None:
            raise ValueError(f"ModulePolicy.apply: unknown method {method!r}")
        return (*self._step(params, carry, obs, reset), log_std)


def module_size(spec: str, shape, hidden_size: int, dtype: str = "float32") -> tuple[int, int]:
    """(parameter count, carry floats per agent) of the module ``spec`` for an env of ``shape``
    (jaxlab.config.memory.EnvShape), by jax.eval_shape: nothing is computed or allocated. ValueError
    naming ``spec`` when the module cannot be loaded, made or initialised, or breaks the contract."""
    if shape.log_std:
        action = ActionSpec("continuous", dim=shape.log_std)
    elif shape.nvec:  # the env's own, for the errors' words
        action = ActionSpec("discrete" if len(shape.nvec) == 1 else "multi_discrete", shape.nvec)
    elif shape.action_size == 1:
        action = ActionSpec("discrete", (shape.head_size,))
    else:  # the sizes of the factors do not change the count of a head of head_size outputs
        action = ActionSpec("multi_discrete", (shape.head_size - shape.action_size + 1,) + (1,) * (shape.action_size - 1))
    cls = load_module_class(spec)
    try:
        policy = ModulePolicy(make_module(cls, action, hidden_size, dtype), action)
        carry = policy.initial_carry(2)
        policy.initial_carry(3)  # a carry sized for a fixed count of agents fits at most one of two counts
        obs = jax.ShapeDtypeStruct((2, *shape.obs_shape), jnp.uint8 if shape.obs_itemsize == 1 else jnp.float32)
        params = jax.eval_shape(lambda key, c, o: policy.init(key, c, o, jnp.ones(2, bool)),
                                jax.random.PRNGKey(0), carry, obs)
    except ValueError as err:
        raise ValueError(f"policy.module={spec!r}: {err}") from None
    count = sum(int(x.size) for x in jax.tree.leaves(params))
    return count, sum(int(x.size) // 2 for x in jax.tree.leaves(carry))

"""Trainer: wires config -> env -> policy -> rollout -> learner, and keeps the metrics. Wiring only."""

from __future__ import annotations

import functools
import json
import shlex
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable, Sequence

import chex
import jax
import jax.numpy as jnp
import numpy as np

import jaxlab
from jaxlab import config as config_lib
from jaxlab.agent.custom import module_source
from jaxlab.agent.distributions import ActionSpec
from jaxlab.config.memory import obs_norm_on, python_env_error
from jaxlab.config.validate import flag_value, shown_value
from jaxlab.env import is_python_env
from jaxlab.env.sdk import SOURCE_HASH_VERSION, source_hash
from jaxlab.messages import counted
from jaxlab.observe.device_memory import memory_fields
from jaxlab.observe.records import json_safe
from jaxlab.train.learner import METRICS, TrainState, lr_schedule, make_update, optimizer_over
from jaxlab.train.parallel import DataParallel
from jaxlab.train.process_state import ProcessState
from jaxlab.train.build import learner_reward_scale, make_policy, reward_norm_on
from jaxlab.train.normalization import RETURN_STD, Normalization
from jaxlab.train.compiling import host_zeros, jit_once, jit_step, to_device
from jaxlab.train.rollout import TIMING, EpisodeStats, Rollout, make_step


#: A Python env's seeds (seed + env index) stay below this: numpy's legacy np.random.seed / RandomState(seed),
#: which many an env's reset calls, takes no larger one.
PYTHON_ENV_SEEDS = 2**32


def group_seed(seed: int, group: int, python_envs: int = 0) -> int:
    """The env seed of group ``group``: the run's seed for group 0, a distinct 64-bit seed for the others.
    Hashed (SeedSequence), not a multiple of cenv_rng_seed's own index constant: seed * a + group *
    0xD1B54A32D192ED03 made env g - 1 of every group g start the same random stream (with seed 0).
    ``python_envs``: the group's number of Python envs, which are seeded seed + index: a hashed seed then
    stays below PYTHON_ENV_SEEDS - python_envs."""
    if group == 0:
        return seed
    if python_envs:
        return int(np.random.SeedSequence([seed, group]).generate_state(1, np.uint32)[0]) % (PYTHON_ENV_SEEDS
                                                                                             - python_envs)
    return int(np.random.SeedSequence([seed, group]).generate_state(1, np.uint64)[0])


def normalised_uint8_words(config: config_lib.Config, obs_dtype, obs_norm: bool) -> str:
    """What a policy.module's error adds when the module got float32 observations, normalised, where the env
    gives uint8 (train.obs_norm on: auto is, for uint8 of one dimension, codes), else "": a module written for the
    env's uint8 (an nn.Embed of codes, a division by 255) fails or reads them otherwise."""
    if not obs_norm or np.dtype(obs_dtype) != np.uint8:
        return ""
    why = "auto normalises uint8 of one dimension" if config.train.obs_norm == "auto" else "given"
    return (f" (its obs were float32, normalised, not the env's uint8: train.obs_norm is on, {why}; "
            "--train.obs-norm false gives the module the env's uint8 observations)")


def make_group_envs(config: config_lib.Config, num_threads: int) -> list:
    """One VecEnv per group (vec.groups), each with vec.num_envs / groups envs and ``num_threads``
    threads (Sizes.num_threads: vec.num_threads with auto resolved), seeded by group_seed."""
    c = config
    groups = c.vec.groups  # divides num_envs (config.derive_sizes checks it)
    first, size = jax.process_index() * groups, c.vec.num_envs // (groups * jax.process_count())  # this process's
    envs = []
    try:
        for g in range(first, first + groups):
            seed = group_seed(c.train.seed, g, python_envs=size if is_python_env(c.env_name) else 0)
            envs.append(jaxlab.make(c.env_name, num_envs=size, seed=seed,
                                    num_threads=min(num_threads, size),
                                    **config_lib.env_args(c)))
    except BaseException as err:
        for env in envs:
            env.close()
        if is_python_env(c.env_name) and isinstance(err, Exception):
            # the user's code, or an adapter's check that only many envs show (one env object returned for
            # all): one error line (ConfigError, exit 2 in the CLI), as for the env made to read the spaces
            raise python_env_error(c.env_name, err) from err
        raise
    return envs


def with_matmul_precision(fn, precision: str):
    """``fn`` traced under jax.default_matmul_precision(precision) (no change for "default")."""
    if precision == "default":
        return fn

    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        with jax.default_matmul_precision(precision):
            return fn(*args, **kwargs)

    return wrapped


def record_names(config: config_lib.Config, log_names: Sequence[str]) -> tuple[str, ...]:
    """The keys of every record a Trainer of ``config`` returns from mean_and_log, for an env whose
    statistics are ``log_names`` (the first record of a trainer holds two more: compile_cache and
    launch_to_first_update_s; on a GPU, the device memory's). Known before anything is built: `jaxlab
    config` checks checkpoint.best_metric against them as `jaxlab train` does."""
    return ("global_step", "update", "wall_time", "sps", "compiles", *METRICS,
            *((RETURN_STD,) if reward_norm_on(config) else ()), "episodes", *log_names,
            *(f"time_{k}" for k in (*TIMING, "learn")), "time_other")


def refuse_an_earlier_run(run_dir: str | Path, update: int = 0) -> None:
    """ConfigError, before anything is written, when ``run_dir`` holds a run already (checkpoints, or a
    non-empty metrics.jsonl; see jaxlab.observe.records.earlier_run): a trainer recording there would
    append its records to that run's. The Python API's wording of jaxlab.run.loop.refuse_an_earlier_run;
    ``update``: the update the trainer is at (past 0 after load_checkpoint: the hint names record_to's
    ``resumed``)."""
    from jaxlab.observe.records import earlier_run

    what = earlier_run(Path(run_dir))
    if what is None:
        return
    if update > 0:  # a trainer that loaded a checkpoint
        resume = (f"if this trainer continues that run (it is at update {update}) say so with "
                  f"record_to({str(run_dir)!r}, resumed=True), ")
    elif what.startswith("checkpoints"):
        resume = (f"continue that run from its checkpoints with jaxlab.run.loop.train_run(config, "
                  f"{str(run_dir)!r}, resume={str(Path(run_dir) / 'checkpoints')!r}), ")
    else:
        resume = ""
    raise config_lib.ConfigError(f"run dir {run_dir} already holds a run ({what}); a trainer recording there would "
                                 f"append its records to that run's: give a new run_dir, {resume}or move "
                                 "that run away first")


def python_number(value) -> int | float:
    """A 0-d metric array as a Python number: an int for an integer one (epochs_run, written 2.0 to
    metrics.jsonl when every metric was made a float), else a float."""
    return int(value) if np.issubdtype(np.asarray(value).dtype, np.integer) else float(value)


class Trainer:
    """PPO on one VecEnv. evaluate() collects a segment, train() updates on it, mean_and_log() returns
    (and, with a run_dir or after record_to(run_dir), appends to metrics.jsonl) the metrics of the update.
    A run_dir that holds a run already is refused (ConfigError), and one that another process holds
    (RunDirInUse), before anything is built or written; the trainer holds its lock until close(), which
    writes its summary.json (see record_to).

    ``max_traces``: when set, each jitted function fails (chex.assert_max_traces) if traced more often.
    """

    def __init__(self, config: config_lib.Config, run_dir: str | Path | None = None,
                 max_traces: int | None = None):
        self.config = config
        c, t = config, config.train
        self._metrics_file = None
        self._run_lock = None  # the run dir's lock, while this trainer owns its run dir (record_to)
        if run_dir is not None:  # before the envs and the compiles
            from jaxlab.run.lock import refuse_if_in_use

            refuse_if_in_use(run_dir, named="run_dir")
            refuse_an_earlier_run(run_dir)
        from jaxlab.config.memory import env_shape
        from jaxlab.run import compile_cache

        self.compile_cache = compile_cache.enable(c.device.compile_cache)  # before anything compiles
        self._cache_counts = compile_cache.counts()  # None once the first record has the verdict
        from jaxlab.run.launch import start_clock

        self._launched = start_clock()  # launch_to_first_update_s counts from it (None: the process's start)

        shape = env_shape(c)
        self.sizes = config_lib.derive_sizes(c, shape.agents_per_env)  # every check before any env
        config_lib.check_network(c, shape.obs_shape)
        self.envs = make_group_envs(c, self.sizes.num_threads)
        self.env = self.envs[0]  # the spaces, statistics and options of every group's env
        self.env_source = {"library": c.env_library or None, "source_hash": source_hash(c.env_library),
                           "hash_version": SOURCE_HASH_VERSION}
        self.spec = ActionSpec.from_space(self.env.action_space)
        self.policy = make_policy(c, self.spec)  # the built-in ActorCritic or policy.module's
        self.policy_source = module_source(c.policy.module) if c.policy.module else None
        obs_space = self.env.observation_space
        self.norm = Normalization(obs_norm_on(c, shape), reward_norm_on(c), obs_space.shape,
                                  self.sizes.num_agents, t.gamma, jax.process_count())
        A = self.sizes.num_agents
        # the schedule's length is the train state's total_steps, not part of any compile
        self.total_opt_steps = self.sizes.num_updates * t.update_epochs * self.sizes.num_minibatches
        self.schedule = lr_schedule(t.learning_rate, t.anneal_lr, t.min_lr_ratio)
        optimizer = optimizer_over(self.schedule, self.total_opt_steps, t.max_grad_norm)  # its init's structure
        obs = np.zeros((A, *obs_space.shape), np.float32 if self.norm.obs_norm else obs_space.dtype)

        def init_state(seed, carry, obs, reset):
            init_key, rollout_key, update_key = jax.random.split(jax.random.PRNGKey(seed), 3)
            params = self.policy.init(init_key, carry, obs, reset)
            return params, optimizer.init(params), rollout_key, update_key

        # the keys, the policy's init and the optimizer's: one executable that runs once (cached on disk
        # like the others), instead of a small compile per eager op (about 4.7 s of a warm start)
        try:
            params, opt_state, rollout_key, self.update_key = jit_once(init_state)(
                np.int64(t.seed), self.policy.initial_carry(A), obs, np.ones(A, bool))
            if c.policy.module:  # its own unroll, if any, must be stepping's equivalent
                self.policy.check_unroll(params, obs.shape[1:], obs.dtype)
                self.policy.check_agents_apart(params, obs.shape[1:], obs.dtype)
                ignored_carry = self.policy.carry_unused(params, obs.shape[1:], obs.dtype)
                if ignored_carry:
                    print(f"jaxlab: warning: policy.module={c.policy.module!r}: {ignored_carry}")
        except ValueError as err:  # a policy.module breaking the contract (edited since its run was checked)
            self.close()
            if not c.policy.module or isinstance(err, config_lib.ConfigError):
                raise
            raise config_lib.ConfigError(f"policy.module={c.policy.module!r}: {err}"
                                         f"{normalised_uint8_words(c, obs_space.dtype, self.norm.obs_norm)}"
                                         ) from None
        self.state = self._train_state(params, opt_state, host_zeros((), np.int32))
        self._split_key = jit_once(lambda key: tuple(jax.random.split(key)))  # each update's key
        self.num_params = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(params))

        self.traces = defaultdict(int)
        self.parallel = DataParallel(self.sizes.devices) if self.sizes.devices > 1 or jax.process_count() > 1 \
            else None  # None: one device, one process
        policy = self.parallel.wrap(self.policy) if self.parallel else self.policy
        step, finish = make_step(self.norm.acting_policy(policy), self.spec, self.env.buffers.layout,
                                 on_trace=lambda: self._traced("rollout"))
        update = make_update(self.parallel.wrap(self.policy, training=True) if self.parallel else policy,
                             self.spec, self.schedule, max_grad_norm=t.max_grad_norm,
                             num_minibatches=self.sizes.num_minibatches, update_epochs=t.update_epochs,
                             gamma=t.gamma, lam=t.gae_lambda, reward_scale=learner_reward_scale(c),
                             clip_coef=t.clip_coef, vf_coef=t.vf_coef, vf_clip_coef=t.vf_clip_coef, ent_coef=t.ent_coef, norm_adv=t.norm_adv,
                             on_trace=lambda: self._traced("update"), advantage=t.advantage,
                             rho_clip=t.vtrace_rho_clip, c_clip=t.vtrace_c_clip, prio_alpha=t.prio_alpha,
                             prio_beta0=t.prio_beta0, target_kl=t.target_kl)
        step, finish, update = (with_matmul_precision(f, c.device.matmul_precision) for f in (step, finish, update))
        if max_traces is not None:
            step, finish, update = (chex.assert_max_traces(f, n=max_traces) for f in (step, finish, update))
        norm, parallel = self.norm, self.parallel

        def prepare_and_update(state, norm_state, segment, key):
            # the normalisation (when on) inside the update's one compile: see jaxlab.train.normalization
            norm_state, segment = norm.prepare_batch(norm_state, segment)
            state, metrics = update(state, segment, key)
            if parallel is not None:
                norm_state = parallel.keep_replicated(norm_state)
            return state, norm_state, metrics

        self._update = jax.jit(prepare_and_update, donate_argnums=(0,))
        if self.parallel:
            self._update = self.parallel.wrap_update(self._update)
        group = self.env.num_agents
        try:  # the envs' first reset: a Python env's own code, with the run's seeds (numpy's legacy seeding)
            self.rollout = Rollout(self.envs, jit_step(step), jit_step(finish), self.sizes.horizon,
                                   [self.policy.initial_carry(group) for _ in self.envs], rollout_key,
                                   segments=self.sizes.segments)
        except Exception as err:
            if not is_python_env(c.env_name):
                raise
            self.close()
            raise python_env_error(c.env_name, err) from None
        self.rollout.first_group = jax.process_index() * c.vec.groups  # the sampling keys' group index
        if self.parallel:
            self.parallel.place(self)
        # a run over several processes: checkpoints of global arrays, each process's rows its own
        self.process_state = ProcessState() if jax.process_count() > 1 else None

        self.global_step = 0
        self.update_index = 0
        self.segment = None
        self.start_time = time.perf_counter()
        self.learn_time = 0.0
        self.episode_stats = EpisodeStats(self.env.kind.log_names)
        self._last_metrics: dict = {}
        self._last_log_time = self.start_time
        self._last_log_step = 0
        self._warned_env_state = False
        self.run_dir = None
        if run_dir is not None:
            self.record_to(run_dir)

    def record_to(self, run_dir: str | Path, resumed: bool = False, owner: bool = True) -> None:
        """Writes the config to RUN_DIR/config.toml and appends each update's metrics to metrics.jsonl
        from now on. A run dir that holds a run already is refused (ConfigError, nothing written;
        refuse_an_earlier_run), unless ``resumed``: this trainer continues that run from one of its
        checkpoints (load_checkpoint), and metrics.jsonl holds no record after the update it resumed at
        (jaxlab.run.resume.keep_metrics_until cuts the later ones; train_run does both).
        ``owner``: the trainer owns the run dir, as `jaxlab train` does its own: it holds the run dir's
        lock until close() (a run dir another process holds is refused: RunDirInUse, nothing written),
        writes run.json now (a resume's stale summary.json goes) and summary.json at close() (see
        end_run), so that `jaxlab runs` tells how the run ended. train_run, which does all that itself,
        passes False. In a run over several processes only process 0 writes the run dir's records (config.toml,
        metrics.jsonl, the lock, run.json and summary.json): the others record nothing, as under train_run."""
        from jaxlab.run.distributed import is_primary
        from jaxlab.run.lock import RunDirLock, refuse_if_in_use

        run_dir = Path(run_dir)
        if not is_primary():
            self.run_dir = run_dir
            return
        if self._run_lock is not None:  # a run dir recorded to before: its run ends here
            self.end_run()
        if owner:
            refuse_if_in_use(run_dir, named="run_dir")
        if resumed:
            self._check_resumed_records(run_dir / "metrics.jsonl")
        else:
            refuse_an_earlier_run(run_dir, self.update_index)
        lock = RunDirLock(run_dir, named="run_dir").__enter__() if owner else None  # creates run_dir
        try:
            self.run_dir = run_dir
            self.run_dir.mkdir(parents=True, exist_ok=True)
            (self.run_dir / "config.toml").write_text(config_lib.to_toml(self.config))
            if owner:
                self._start_run_records()
            if self._metrics_file is not None:
                self._metrics_file.close()
            self._metrics_file = open(self.run_dir / "metrics.jsonl", "a")
        except BaseException:
            if lock is not None:
                lock.__exit__(None, None, None)
            raise
        self._run_lock = lock

    def _start_run_records(self) -> None:
        """run.json of the run this trainer owns (jaxlab.observe.records.write_run_info; its command is
        the Python program's), and no summary.json until it ends (a resumed run's is stale)."""
        from jaxlab.observe import records

        (self.run_dir / "summary.json").unlink(missing_ok=True)
        records.write_run_info(self.run_dir, self.config, [f"{d.platform}:{d.device_kind}" for d in jax.devices()])

    def end_run(self, error: BaseException | None = None) -> None:
        """Writes summary.json of the run dir this trainer owns (record_to) and releases its lock; close()
        calls it, and leaving a ``with Trainer(...)`` block with ``error`` (the exception). How the run
        ended, as `jaxlab runs` shows it: done at its last update; ``error``: "error" (a KeyboardInterrupt
        as stopped at once by SIGINT); closed before its last update: stopped ("closed at update U of N").
        Nothing for a trainer that owns no run dir, or once done."""
        from jaxlab.observe import records

        lock, self._run_lock = self._run_lock, None
        if lock is None:
            return
        status = {}
        if error is not None:
            status["error"] = f"{type(error).__name__}: {error}".splitlines()[0]
            if isinstance(error, KeyboardInterrupt):
                status["stopped"] = "SIGINT"
        elif self.update_index < self.sizes.num_updates:
            status["stopped"] = f"closed at update {self.update_index} of {self.sizes.num_updates}"
        best = self.config.checkpoint.best_metric
        try:
            records.write_summary(self.run_dir, best if best in self.record_names else "episode_return", **status)
        finally:
            lock.__exit__(None, None, None)

    def _check_resumed_records(self, path: Path) -> None:
        """ConfigError when ``path`` (a metrics.jsonl this trainer would continue) holds records after
        its update: the updates it trains next would be in it twice."""
        from jaxlab.observe.records import metric_lines

        if not path.is_file():
            return
        later = [record["update"] for _, record in metric_lines(path)
                 if isinstance(record.get("update"), int) and record["update"] > self.update_index]
        if later:
            raise config_lib.ConfigError(
                f"{path} holds records up to update {max(later)}, after update {self.update_index} that this "
                f"trainer continues from, so its next updates would be in it twice; drop them first with "
                f"jaxlab.run.resume.keep_metrics_until({str(path)!r}, {self.update_index}), or record to a new run dir")

    def _train_state(self, params, opt_state, step: jax.Array) -> TrainState:
        """The train state at optimizer step ``step`` (int32 []) of this run's length (total_opt_steps, from
        the config: a checkpoint's step continues under the resumed config's train.total_timesteps)."""
        return TrainState(params, opt_state, step, to_device(np.asarray(self.total_opt_steps, np.int32)))

    def _traced(self, name: str) -> None:
        self.traces[name] += 1

    @property
    def compiles(self) -> int:
        """How many times a jitted function was traced (and so compiled) in this run."""
        return sum(self.traces.values())

    @property
    def record_names(self) -> tuple[str, ...]:
        """The keys of every record mean_and_log returns (see record_names)."""
        return record_names(self.config, self.env.kind.log_names)

    @property
    def timing(self) -> dict[str, float]:
        """Seconds spent so far stepping the C envs, in policy calls during rollouts, copying between
        host and device, and in updates (the rest of the wall time is "other")."""
        return {**self.rollout.timing, "learn": self.learn_time}

    @property
    def acting_params(self):
        """What the rollout's policy takes: the params, with the observation statistics when obs_norm is on
        (see jaxlab.train.normalization); ``self.norm.acting_policy(self.policy)`` is that policy."""
        return self.norm.acting_params(self.state.params)

    def evaluate(self) -> None:
        """Collects the update's batch with the current parameters: ``sizes.segments`` segments of T
        steps of every agent, one after the other, trained on as segments x agents sequences. The
        batch's arrays are the rollout's device buffers: valid until the next evaluate()."""
        for s in range(self.sizes.segments):
            segment, infos = self.rollout.collect(self.parallel.local(self.acting_params) if self.parallel
                                                  else self.acting_params, s)
            for info in infos:
                self.episode_stats.add(info)
        self.segment = segment  # raw: train() normalises it (when on) in the update's compile
        self.global_step += self.sizes.batch_size

    def train(self) -> dict:
        """One PPO update on the collected segment; returns its losses and diagnostics."""
        if self.segment is None:
            raise RuntimeError("Trainer.train() needs a segment: call evaluate() first")
        tic = time.perf_counter()
        self.update_key, key = self._split_key(self.update_key)
        self.state, self.norm.state, metrics = self._update(self.state, self.norm.state, self.segment, key)
        self.segment = None
        self._last_metrics = {k: python_number(v) for k, v in jax.device_get(metrics).items()}
        self.learn_time += time.perf_counter() - tic
        self.update_index += 1
        return self._last_metrics

    def nonfinite_env_outputs(self) -> str | None:
        """What the env returned that was NaN or infinite in the last batch (its rewards, float
        observations), as words, e.g. "non-finite rewards (12 of 256)", or None when all were finite
        (or cannot be read from this process). Looked at only after a loss became non-finite: it tells
        a broken env from a learning rate too high."""
        return self._nonfinite_in_batch((("rewards", "rewards"), ("observations", "obs")))

    def nonfinite_policy_outputs(self) -> str | None:
        """What the policy gave NaN or infinite while it acted in the last batch (its values, its actions'
        log-probabilities), as words, or None when all were finite (or cannot be read from this process):
        the parameters the update started from were already broken, which no update's step did."""
        return self._nonfinite_in_batch((("values", "values"), ("log-probabilities", "logp")))

    def _nonfinite_in_batch(self, fields) -> str | None:
        """"non-finite WHAT (n of m values)" for each (WHAT, rollout buffer name) in ``fields`` whose float
        array holds NaN or infinities, joined by "and"; None when none does."""
        found = []
        for what, name in fields:
            try:
                values = np.asarray(getattr(self.rollout.buffers, name))
            except Exception:  # noqa: BLE001 - e.g. an array spread over other processes: no diagnosis
                continue
            if values.dtype.kind != "f":
                continue  # uint8 observations are always finite
            bad = int(np.count_nonzero(~np.isfinite(values)))
            if bad:
                found.append(f"non-finite {what} ({bad:,} of {values.size:,} values)")
        return " and ".join(found) or None

    def mean_and_log(self) -> dict:
        """The update's metrics, SPS and the mean episode statistics since the last call; appended to
        metrics.jsonl when the trainer has a run dir. The env's statistics are None when no episode ended."""
        now = time.perf_counter()
        sps = (self.global_step - self._last_log_step) / max(now - self._last_log_time, 1e-9)
        record = {"global_step": self.global_step, "update": self.update_index,
                  "wall_time": now - self.start_time, "sps": sps, "compiles": self.compiles,
                  **self._last_metrics, **self.norm.metrics()}
        if self.parallel:
            self.parallel.sum_episode_stats(self.episode_stats)  # every process's episodes
        record.update(self.episode_stats.take())
        timing = self.timing
        record.update({f"time_{k}": v for k, v in timing.items()})
        record["time_other"] = max(record["wall_time"] - sum(timing.values()), 0.0)
        record.update(memory_fields(jax.local_devices()[:self.sizes.devices]))  # {} on a CPU
        if self._cache_counts is not None:  # the first record of this trainer: how the start went
            from jaxlab.run import compile_cache
            from jaxlab.run.launch import seconds_since

            record["compile_cache"] = compile_cache.verdict(self._cache_counts, compile_cache.counts())
            record["launch_to_first_update_s"] = seconds_since(self._launched)
            self._cache_counts = None
        self._last_log_time, self._last_log_step = now, self.global_step
        if self._metrics_file is not None:
            self._metrics_file.write(json.dumps(json_safe(record)) + "\n")  # NaN as null: valid JSON
            self._metrics_file.flush()
        return record

    # ---- checkpoints (the format is described in jaxlab/checkpoint.py) ----

    def checkpoint_state(self, with_env: bool = True) -> dict:
        """Every array that shapes the rest of the run (taken between updates); the C envs' state
        ("env": one host copy per group, see VecEnv.save_state) only ``with_env`` and only for an env
        that has one (a Python env has ``has_state`` False: its checkpoints hold no env state, said once
        per trainer on stderr). In a run over several processes, global arrays that hold every
        process's state (see jaxlab.train.process_state); in one process, this process's arrays."""
        state = self.own_checkpoint_state(with_env)
        return self.process_state.to_global(state) if self.process_state else state

    def own_checkpoint_state(self, with_env: bool = True) -> dict:
        """checkpoint_state's tree of this process's own values (its envs, carries and keys)."""
        r = self.rollout
        state = {"train": {"params": self.state.params, "opt_state": self.state.opt_state, "step": self.state.step},
                 "update_key": self.update_key, "rollout": {"key": r.key, "carry": r.carry}}
        if self.norm.state:
            state["norm"] = self.norm.state
        if with_env and self.env.has_state:
            state["env"] = [env.save_state() for env in self.envs]
        elif with_env and not self._warned_env_state:
            self._warned_env_state = True
            print(f"jaxlab: warning: this checkpoint holds no env state: {self.config.env_name} is a Python env, "
                  "whose state jaxlab cannot save; resuming from it starts new episodes", file=sys.stderr, flush=True)
        return state

    def checkpoint_meta(self, metadata: dict | None = None) -> dict:
        from jaxlab import __version__ as jaxlab_version
        from jaxlab.checkpoint import FORMAT_VERSION

        return {"format": FORMAT_VERSION, "jaxlab_version": jaxlab_version, "env_name": self.config.env_name,
                "env_source": self.env_source,
                "policy_source": self.policy_source,
                "config": config_lib.to_toml(self.config), "obs_norm": self.norm.obs_norm,
                "global_step": self.global_step, "update": self.update_index, "rollout_steps": self.rollout.step_count,
                "wall_time": time.perf_counter() - self.start_time, "timing": self.timing,
                "metadata": metadata or {}, **({"processes": jax.process_count()} if self.process_state else {})}

    def restore_state(self, state: dict, meta: dict) -> None:
        """Puts a checkpoint's ``state`` and ``meta`` (from jaxlab.checkpoint.read) into this trainer."""
        to_jax = lambda tree: jax.tree.map(jnp.asarray, tree)  # noqa: E731
        train = state["train"]
        self.state = self._train_state(to_jax(train["params"]), to_jax(train["opt_state"]), jnp.asarray(train["step"]))
        self.update_key = jnp.asarray(state["update_key"])
        r, saved = self.rollout, state["rollout"]
        r.key = jnp.asarray(saved["key"])
        r.set_carry(to_jax(saved["carry"]))
        r.step_count = int(meta["rollout_steps"])
        if self.norm.state:
            self.norm.state = to_jax(state["norm"])
        if self.env.has_state:
            try:
                for env, env_state in zip(self.envs, state["env"], strict=True):
                    env.load_state({k: np.asarray(v) for k, v in env_state.items()})
            except ValueError as err:  # the env's code or parameters changed (see check_env_source)
                raise config_lib.ConfigError(f"cannot load the checkpoint's env state into this env: {err}; "
                                             "resume with the env as it was, or start a new run") from None
        else:  # no env state saved: new episodes, seeded from the run's seed, the step and the group (its
            # index among every process's groups)
            for g, env in enumerate(self.envs, start=r.first_group):
                entropy = np.random.SeedSequence([self.config.train.seed, r.step_count, g]).generate_state(1)[0]
                env.reset(seed=int(entropy) % (PYTHON_ENV_SEEDS - env.num_envs))  # its seed + index fit, as above
                env.terminals.fill(True)  # every agent starts an episode
        self.global_step, self.update_index = int(meta["global_step"]), int(meta["update"])
        self.start_time = time.perf_counter() - float(meta["wall_time"])
        r.timing.update({k: v for k, v in meta["timing"].items() if k in r.timing})
        self.learn_time = float(meta["timing"].get("learn", 0.0))
        self._last_log_time, self._last_log_step = time.perf_counter(), self.global_step
        self.segment = None
        if self.parallel:
            self.parallel.place(self)

    def save_checkpoint(self, path: str | Path, metadata: dict | None = None) -> Path:
        """Writes a checkpoint of the whole training state at ``path`` (a new directory), synchronously;
        in a run over several processes every process calls it, in step, with the same path."""
        from jaxlab import checkpoint

        return checkpoint.write(Path(path), self.checkpoint_state(), self.checkpoint_meta(metadata))

    def checkpoint_template(self) -> dict:
        """The shapes and dtypes of checkpoint_state() as jax.ShapeDtypeStruct leaves, without copying
        any array (the restore target of a checkpoint; with the global shapes and shardings in a run over
        several processes)."""
        template = self.checkpoint_template_local()
        return self.process_state.template(template) if self.process_state else template

    def checkpoint_template_local(self) -> dict:
        """checkpoint_template with this process's shapes and no sharding (own_checkpoint_state's)."""
        state = self.own_checkpoint_state(with_env=False)
        template = jax.tree.map(lambda x: jax.ShapeDtypeStruct(np.shape(x), x.dtype), state)
        if self.env.has_state:
            template["env"] = [{k: jax.ShapeDtypeStruct(shape, dtype) for k, (shape, dtype) in env.state_shapes().items()}
                               for env in self.envs]
        return template

    def load_checkpoint(self, path: str | Path, meta: dict | None = None, any_env: bool = False,
                        warn: Callable[[str], None] = print) -> dict:
        """Restores the checkpoint at ``path`` (written by save_checkpoint or a run); returns its meta
        (``meta``: the checkpoint's meta when the caller has read it already). The checkpoint must
        come from the same env, env params, agent count and network, from the same env source
        (see check_env_source; ``any_env`` accepts another, with a warning) and from as many processes
        (check_processes; in a run over several, every process calls this, in step). A policy.module
        file edited since the checkpoint gets a warning through ``warn`` (policy_source_change)."""
        from jaxlab import checkpoint

        meta = checkpoint.read_meta(Path(path)) if meta is None else meta
        check_processes(meta, Path(path), jax.process_count())
        check_batch(meta, Path(path), self.sizes)
        check_compatible(config_lib.checkpoint_config(meta, library=self.config.env_library or None),
                         self.config)
        changed = check_env_source(meta.get("env_source"), self.env_source, any_env)
        if changed:
            warn(changed)
        state, meta = checkpoint.read(Path(path), self.checkpoint_template(), meta)
        self.restore_state(self.process_state.own_rows(state) if self.process_state else state, meta)
        edited = policy_source_change(meta.get("policy_source"), self.policy_source)
        if edited:  # after the read: a damaged checkpoint passed over does not warn twice
            warn(f"warning: {edited}")
        note = checkpoint.version_note(meta)
        if note:
            warn(note)
        return meta

    def load_policy(self, path: str | Path, meta: dict | None = None) -> dict:
        """Restores only the policy of the checkpoint at ``path``: the train state (params, optimizer
        state, step) and the normalisation statistics, what playing it needs, from a checkpoint of any
        process count (the envs, carries, keys and counters stay this trainer's); returns its meta.
        The checkpoint must come from the same network and normalisation (check_compatible)."""
        from jaxlab import checkpoint

        meta = checkpoint.read_meta(Path(path)) if meta is None else meta
        check_compatible(config_lib.checkpoint_config(meta, library=self.config.env_library or None),
                         self.config)
        template = {k: v for k, v in self.checkpoint_template_local().items() if k in ("train", "norm")}
        parts, meta = checkpoint.read_parts(Path(path), template, meta)
        to_jax = lambda tree: jax.tree.map(jnp.asarray, tree)  # noqa: E731
        train = parts["train"]
        self.state = self._train_state(to_jax(train["params"]), to_jax(train["opt_state"]), jnp.asarray(train["step"]))
        if self.norm.state:
            self.norm.state = to_jax(parts["norm"])
        if self.parallel:
            self.parallel.place(self)
        return meta

    def close(self) -> None:
        """Closes the envs and metrics.jsonl, and ends the run of a run dir this trainer owns (end_run)."""
        for env in getattr(self, "envs", []):
            env.close()
        if self._metrics_file is not None:
            self._metrics_file.close()
            self._metrics_file = None
        self.end_run()

    def __enter__(self) -> "Trainer":
        return self

    def __exit__(self, exc_type, error, traceback) -> None:
        if error is not None:
            self.end_run(error)
        self.close()


def env_source_change(saved: dict | None, current: dict) -> str | None:
    """How where a checkpoint's env came from (its meta's env_source: library, source_hash and
    hash_version, see jaxlab.env.sdk.source_hash) differs from ``current``: "it came from ..., now
    from ..." naming both, for each command to word its sentence around; None when they match (or the
    checkpoint predates the record)."""
    if not saved or saved.get("source_hash") == current.get("source_hash"):
        return None
    older = saved.get("hash_version", 1) != current.get("hash_version", 1)
    if older and current.get("library"):  # an older jaxlab's hash (paths too): compare the same way
        from jaxlab.env.sdk import BuildError, legacy_source_hash

        try:
            if legacy_source_hash(current["library"]) == saved.get("source_hash"):
                return None
        except (OSError, BuildError):
            pass
    before = f"{saved.get('library') or 'the built-in envs'} (source {str(saved.get('source_hash'))[:12]})"
    now = f"{current.get('library') or 'the built-in envs'} (source {str(current.get('source_hash'))[:12]})"
    note = (" (the checkpoint's hash is an older jaxlab's, taken over the files' paths too: the env changed or "
            "moved)" if older else "")
    if not older and saved.get("library") == current.get("library") and str(current.get("library")).endswith(".h"):
        note = same_header_changed_note()
    return f"it came from {before}, now from {now}{note}"


def policy_source_change(saved: dict | None, current: dict | None) -> str | None:
    """How a policy.module's code differs from the checkpoint's (its meta's policy_source, see
    jaxlab.agent.custom.module_source): words naming the file, both hashes and that the weights were
    trained under the old code; None when it is the same, or either side has no record (a checkpoint
    older than the record, or a module without a file). Not refused: the arrays are still checked one
    by one as they are restored, and fixing a bug then resuming is the common case."""
    if not saved or not current or saved.get("source_hash") == current.get("source_hash"):
        return None
    return (f"the policy.module file {current['file']} (or a module next to it that it imports) changed since the "
            f"checkpoint (source {str(saved.get('source_hash'))[:12]}, now {current['source_hash'][:12]}): its "
            "weights were trained under the old code and now run under the new one; if the edit changed what "
            "they compute, start a new run instead")


def same_header_changed_note() -> str:
    """Why a header at the same path can have another source hash: the hash covers every file it
    includes, jaxlab's SDK headers too."""
    from jaxlab.env.sdk import include_dir

    return (f" (the header or a file it includes changed; jaxlab's SDK headers in {include_dir()} count too, so a "
            "jaxlab upgrade that changed them reads as a change of the env)")


def check_env_source(saved: dict | None, current: dict, any_env: bool = False) -> str | None:
    """Checks, for a resume, where a checkpoint's env came from against this trainer's (see
    env_source_change). ConfigError naming both when the source changed, unless ``any_env``: then the
    warning to show. None when they match."""
    changed = env_source_change(saved, current)
    if changed is None:
        return None
    if any_env:
        return (f"resuming with a changed env: {changed}; its saved env state is loaded into the new code "
                "(--resume-any-env)")
    raise config_lib.ConfigError(f"cannot resume: the env's source changed since the checkpoint: {changed}; resume "
                                 "anyway with --resume-any-env (the saved env state must still fit the new code) "
                                 "or start a new run")


def check_batch(meta: dict, path: Path, sizes) -> None:
    """ConfigError naming both when this run's batch (``sizes.batch_size`` steps per update) is not the
    checkpoint's (its global_step / update): a run counts its length in updates of one batch (the end at
    train.total_timesteps // batch, the checkpoints' names, metrics.jsonl, the learning-rate schedule), so
    a resume over another batch trained another number of steps than train.total_timesteps said (update
    390 of batches of 1,024 resumed with batches of 512 for 500K steps ran to update 976: 699K steps).
    A checkpoint whose step is no whole number of updates (none yet) is not checked."""
    update, step = int(meta["update"]), int(meta["global_step"])
    if update <= 0 or step % update or step // update == sizes.batch_size:
        return
    saved = step // update
    segment = sizes.num_envs * sizes.agents_per_env * sizes.horizon  # a batch is whole segments of this horizon
    give = f", or give --train.batch-size {saved}" if saved % segment == 0 else ""
    raise config_lib.ConfigError(
        f"cannot resume: checkpoint {path} trained batches of {saved:,} steps (update {update:,} at step "
        f"{step:,}), this run's are {sizes.batch_size:,} ({sizes.describe().split(';')[0]}); a run counts its "
        f"length in updates of one batch, so resume with the checkpoint's batch (leave out the flags that change "
        f"train.batch_size or train.bptt_horizon{give}) or start a new run")


def checkpoint_processes(meta: dict) -> int:
    """How many processes wrote the checkpoint of ``meta`` (1 when its meta does not say)."""
    return int(meta.get("processes", 1))


def check_processes(meta: dict, path: Path, processes: int, count=None) -> None:
    """ConfigError naming both counts when the checkpoint at ``path`` (its ``meta``) was written by a
    run over another number of processes than ``processes``: each process's envs, carries and keys
    are its own rows of the checkpoint, which another count cannot share out. ``count``: where this
    run's count came from (jaxlab.run.distributed.Given; None: --dist.num-processes or its default), so
    that the fix fits it."""
    saved = checkpoint_processes(meta)
    if saved == processes:
        return

    def plural(n):
        return counted(n, "process", "processes")

    origin = count.origin() if count is not None else ""
    raise config_lib.ConfigError(f"cannot resume: checkpoint {path} was written by a run of {plural(saved)}, "
                                 f"this run has {plural(processes)}{origin}; resume it {resume_with(saved, count)}, "
                                 "or start a new run")


def resume_with(saved: int, count=None) -> str:
    """How to run ``saved`` processes, for check_processes' fix, by where this run's count came from
    (``count``: a distributed.Given): SLURM's task count is changed by srun, not by a flag it overrides."""
    if count is not None and count.source == "env":
        if saved == 1:
            return (f"in one process: give --dist.num-processes 1 ({count.variable} gives the count otherwise), or run "
                    "one task (srun --ntasks 1)")
        return f"in a job step of {saved} tasks (srun --ntasks {saved}, which sets {count.variable})"
    if saved == 1:
        return "in one process (no --dist.num-processes, or --dist.num-processes 1)"
    return f"with --dist.num-processes {saved} (and --dist.coordinator, --dist.process-id 0..{saved - 1})"


#: Config fields a checkpoint's arrays depend on: resuming with another value is refused.
SHAPING = ("env_name", "env", "vec.num_envs", "vec.groups", "policy.hidden_size", "policy.lstm", "policy.encoder",
           "policy.mlp_layers", "policy.shared_trunk", "policy.cnn_channels", "policy.cnn_kernels",
           "policy.cnn_strides", "policy.module", "train.obs_norm")


def _get(config, name: str):
    value = config
    for part in name.split("."):
        value = getattr(value, part)
    return value


def env_params(config: config_lib.Config) -> dict[str, Any]:
    """Every parameter of ``config``'s env, by name, its default filled where the config gives none
    (a C env's); a Python env's, or an env that cannot be found, as the config gives them."""
    from jaxlab.env import registry

    try:
        kind = registry.env_type(config.env_name, config.env_library or None)
        values = registry.resolve_params(kind, dict(config.env))
    except Exception:  # noqa: BLE001 - a Python env (no C type), a library gone: compare as given
        return dict(config.env)
    return {p.name: int(v) if float(v).is_integer() else v for p, v in zip(kind.params, values, strict=True)}


def config_changes(saved: config_lib.Config, new: config_lib.Config) -> list[tuple[str, Any, Any]]:
    """(key, saved value, new value) for every config value that differs, [dist] aside (how the run's
    processes meet; their count is checked by check_processes). Env parameters are compared one by one
    ("env.NAME"), with their defaults filled, so that a default given explicitly is no change."""
    changes = [(name, _get(saved, name), _get(new, name))
               for name in ("env_name", "env_library", "env_mask_check", "preset")
               if _get(saved, name) != _get(new, name)]
    if saved.env != new.env and saved.env_name == new.env_name:
        old, now = env_params(saved), env_params(new)
        changes += [(f"env.{key}", old.get(key), now.get(key)) for key in sorted({*old, *now})
                    if old.get(key) != now.get(key)]
    new_values = config_lib.as_layer(new)
    for section, table in config_lib.as_layer(saved).items():
        if section not in ("env", "dist"):  # env compared whole above
            changes += [(f"{section}.{key}", value, new_values[section][key]) for key, value in table.items()
                        if new_values[section][key] != value]
    return changes


def _keys_a_module_ignores(spec: str) -> set[str]:
    """The [policy] keys ("policy.lstm", ...) that shape nothing of the policy.module ``spec``'s network
    (jaxlab.agent.custom.ignored_keys); the built-in network's alone when it cannot be loaded (its own
    error comes when it is built)."""
    from jaxlab.agent.custom import BUILT_IN_KEYS, ignored_keys, load_module_class

    try:
        return set(ignored_keys(load_module_class(spec)))
    except ValueError:
        return {f"policy.{key}" for key in BUILT_IN_KEYS}


#: What an allowed change does not do, for the line that lists it at a resume.
CHANGE_NOTES = {"train.seed": " (recorded only: the random keys and the C envs' states continue from the "
                              "checkpoint's; a Python env's new episodes take it)"}


def _flag_setting(key: str, value) -> str:
    """The flag that sets config key ``key`` to ``value``: --policy.lstm true, --policy.mlp-layers 128,64."""
    return f"--{key.replace('_', '-')} {shlex.quote(flag_value(value))}"


def _keep_saved_values(refused: list[tuple[str, Any, Any]], sources: dict[str, str] | None) -> str:
    """How to resume with the checkpoint's values of ``refused`` ((key, saved, new) changes): leave the flags
    out, edit the config file that set a value (``sources``: load_config's, key -> the layer that set it; a key
    it lacks, or no ``sources``, counts as a flag), or give the saved values as flags."""
    origins = {key: (sources or {}).get(key, "command line") for key, _, _ in refused}
    ways = ["leave those flags out"] if "command line" in origins.values() else []
    files = {origin for origin in origins.values() if origin != "command line"}
    ways += [f"edit or remove the {'/'.join(k for k, o in origins.items() if o == file)} line of {file}"
             for file in sorted(files)]
    saved_flags = " ".join(_flag_setting(k, old) for k, old, _ in refused if old is not None)
    return ", ".join(ways) + (f", or give {saved_flags}" if ways else f"give {saved_flags}")


def same_obs_norm(saved: config_lib.Config, new: config_lib.Config) -> bool:
    """Whether two configs' train.obs_norm resolve alike for the env's observations (auto and true on float
    observations, or on uint8 codes of one dimension: both on), so that a checkpoint of one resumes with the other."""
    from jaxlab.config.memory import env_shape, obs_norm_on

    shape = env_shape(new)
    return obs_norm_on(saved, shape) == obs_norm_on(new, shape)


def check_compatible(saved: config_lib.Config, new: config_lib.Config,
                     sources: dict[str, str] | None = None) -> list[str]:
    """ConfigError naming every change a checkpoint's arrays cannot take (another env, env params,
    agent count or network; a policy.module file moved elsewhere is the same network); otherwise the
    allowed changes, as lines "key: old -> new". ``sources`` (load_config's, key -> the layer that set it)
    lets the error name a config file that set a refused value (a NAME.toml beside the header) instead
    of a flag."""
    from jaxlab.agent.custom import missing_file_words, moved_module

    changes = config_changes(saved, new)
    for key, _, now in changes:  # a new path for the run's policy file: refused below as another module
        if key == "policy.module" and (missing := missing_file_words(now)):
            raise config_lib.ConfigError(f"policy.module={now!r}: {missing}; give the run's policy file")
    same_network = [c for c in changes if c[0] == "policy.module" and moved_module(c[1], c[2])]  # a moved file
    if saved.policy.module and new.policy.module:  # the built-in network's keys shape nothing of a module
        same_network += [c for c in changes if c[0] in _keys_a_module_ignores(new.policy.module)]
    same_network += [c for c in changes if c[0] == "train.obs_norm" and same_obs_norm(saved, new)]  # auto -> true
    refused = [c for c in changes if (c[0] in SHAPING and c not in same_network) or c[0].split(".")[0] == "env"
               or (c[0] == "train.reward_scale" and (c[1] == "auto") != (c[2] == "auto"))]  # the return stats
    if refused:
        detail = "; ".join(f"{k} was {shown_value(old)}, now {shown_value(new_value)}" for k, old, new_value in refused)
        raise config_lib.ConfigError(f"cannot resume: the checkpoint was trained with another "
                                     f"{'/'.join(k for k, _, _ in refused)} ({detail}); resume with the "
                                     f"checkpoint's values ({_keep_saved_values(refused, sources)}) or "
                                     f"start a new run (without --resume, in a new --run-dir)")
    return [f"{k}: {shown_value(old)} -> {shown_value(now)}{CHANGE_NOTES.get(k, '')}" for k, old, now in changes]


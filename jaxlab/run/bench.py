"""Benchmarks that print figures (never asserted): env stepping and steady training SPS.

`jaxlab bench ENV` runs both for one env with the resolved config (a Python env is compared with the
built-in C env that steps like it, in the same run); scripts/bench_env.py sweeps every env and agent
count, scripts/bench_train.py adds time-to-threshold.
"""

from __future__ import annotations

import time

import numpy as np

import jaxlab
from jaxlab.env import is_python_env, spaces_of
from jaxlab.env.library import constant
from jaxlab.env.python_envs import C_TWINS
from jaxlab.env.spaces import legal_argmax
from jaxlab.messages import counted


def env_steps_per_second(name: str, agents: int, seconds: float, threads: int = 1,
                         params: dict | None = None, library: str | None = None,
                         clock=time.perf_counter) -> tuple[float, float]:
    """(agent-steps/s, seconds per step call) of ``name`` with about ``agents`` agents and random
    actions through the Python API. Actions come from a pool of 64 batches drawn before timing, so the
    figure is the bridge and the env, not numpy's RNG. An env with an action mask gets random legal
    actions, drawn from each step's mask between the timed step calls. ``clock`` measures the time:
    wall time by default; ``time.process_time`` gives agent-steps per CPU-second of this process (all
    its threads), the figure to quote on a machine that other jobs share."""
    params = params or {}
    spaces = spaces_of(name, library=library, **params)
    num_envs = max(1, agents // spaces.agents_per_env)
    threads = min(threads, num_envs, constant("MAX_CHUNKS"))
    with jaxlab.make(name, num_envs=num_envs, seed=0, num_threads=threads, library=library, **params) as env:
        rng = np.random.default_rng(0)
        if env.has_mask:
            return _masked_steps_per_second(env, rng, seconds, clock)
        pool = [env.action_space.sample(rng, env.num_agents) for _ in range(64)]
        env.reset()
        for actions in pool:
            env.step(actions)
        calls = 0
        start = clock()
        while True:
            for actions in pool:
                env.step(actions)
            calls += len(pool)
            elapsed = clock() - start
            if elapsed >= seconds:
                return calls * env.num_agents / elapsed, elapsed / calls


def report_env(name: str, agents: int, seconds: float, num_threads: int = 1, params: dict | None = None,
               library: str | None = None) -> list[str]:
    """The env-stepping lines of `jaxlab bench`: ``name`` (of ``library``, an env library or header, when
    given) with 1 and ``num_threads`` C threads; a Python
    env in its one thread and, when a built-in C env steps like it (python_envs.C_TWINS), that C env
    with as many agents and 1 thread, with how many times slower the Python env is."""
    if not is_python_env(name):
        lines = []
        for threads in sorted({1, num_threads}):
            sps, per_call = env_steps_per_second(name, agents, seconds, threads, params, library)
            lines.append(f"env {name}: {agents:,} agents, {counted(threads, 'C thread')}: "
                         f"{sps / 1e6:,.2f}M agent-steps/s, "
                         f"{per_call * 1e6:,.1f} us per step call (random actions)")
        return lines
    sps, per_call = env_steps_per_second(name, agents, seconds, 1, params)
    lines = [f"env {name}: {agents:,} agents, Python env (one thread): {sps / 1e6:,.3f}M agent-steps/s, "
             f"{per_call * 1e6:,.1f} us per step call (random actions)"]
    twin = C_TWINS.get(name)
    if twin is not None:
        c_sps, c_per_call = env_steps_per_second(twin, agents, seconds, 1)
        lines.append(f"env {twin} (built-in C, steps like {name}): {agents:,} agents, 1 C thread: "
                     f"{c_sps / 1e6:,.2f}M agent-steps/s, {c_per_call * 1e6:,.1f} us per step call; "
                     f"the Python env is {c_sps / sps:,.0f}x slower")
    return lines


def _masked_steps_per_second(env, rng: np.random.Generator, seconds: float, clock=time.perf_counter) -> tuple[float, float]:
    """env_steps_per_second for an env with an action mask: each step's actions are uniform-ish random
    legal ones (the argmax of random bytes over the legal entries of each component), drawn untimed."""
    pool = [rng.integers(1, 256, env.action_mask.shape, dtype=np.uint8) for _ in range(8)]

    def legal(i: int) -> np.ndarray:
        return legal_argmax(env.action_space, env.action_mask, pool[i % len(pool)])

    env.reset()
    for i in range(64):
        env.step(legal(i))
    calls, elapsed = 0, 0.0
    while elapsed < seconds:
        actions = legal(calls)
        tic = clock()
        env.step(actions)
        elapsed += clock() - tic
        calls += 1
    return calls * env.num_agents / elapsed, elapsed / calls


def update_flops(num_params: int, samples: int, epochs: int) -> float:
    """The update's matmul FLOPs by the 6N rule: every weight takes part in one multiply-add per sample
    forward and two backward, so 6 x params per sample and epoch (biases, activations and the optimizer
    left out; a CNN's convolutions reuse their weights over the image and do more than this counts)."""
    return 6.0 * num_params * samples * epochs


def kl_stop_note(epochs: float, update_epochs: int, which: str = "on average") -> str:
    """What the FLOPs of an update count when train.target_kl stopped its epochs early (``epochs``: the mean
    epochs_run of the timed updates, or ``which`` others'), for after the figures; "" when every epoch ran."""
    if epochs == update_epochs:
        return ""
    return f" (train.target_kl let {epochs:.3g} of its {update_epochs} epochs run, {which})"


def steady_training(config, updates: int) -> dict:
    """Trains ``config`` for 1 + ``updates`` updates (fewer when its total steps end sooner); returns the
    first update's seconds (compiles included), the steady SPS of the updates after it, how many ran
    (``updates``), the mean of their epochs_run (``epochs``: train.update_epochs unless train.target_kl
    stopped some) and their time split {env, policy, copy, learn, other} in seconds. ConfigError when
    the config's total steps leave no update after the first."""
    from jaxlab.config import ConfigError
    from jaxlab.run.loop import train_loop
    from jaxlab.train.trainer import Trainer

    with Trainer(config) as trainer:
        tic = time.perf_counter()
        train_loop(trainer, updates=1)
        first = time.perf_counter() - tic
        before = dict(trainer.timing)
        tic = time.perf_counter()
        records = train_loop(trainer, updates=updates)
        elapsed, ran = time.perf_counter() - tic, len(records)
        if ran == 0:
            raise ConfigError(f"train.total_timesteps={config.train.total_timesteps} leaves no update to time "
                              f"after the first (a batch is {trainer.sizes.batch_size:,} steps); leave "
                              "--train.total-timesteps out, the benchmark sets it from its updates")
        split = {k: trainer.timing[k] - before[k] for k in trainer.timing}
        split["other"] = elapsed - sum(split.values())
        epochs = sum(record["epochs_run"] for record in records) / ran
        return {"first_update_s": first, "sps": ran * trainer.sizes.batch_size / elapsed, "updates": ran,
                "epochs": epochs, "elapsed_s": elapsed, "split": split, "sizes": trainer.sizes,
                "num_params": trainer.num_params}


def report_training(config, updates: int) -> str:
    result = steady_training(config, updates)
    updates = result["updates"]
    split = ", ".join(f"{k} {v:.2f} s" for k, v in result["split"].items())
    epochs = result["epochs"]  # the epochs the timed updates ran: those train.target_kl skipped cost nothing
    flops = update_flops(result["num_params"], result["sizes"].batch_size, epochs)
    stopped = kl_stop_note(epochs, config.train.update_epochs)
    learn_per_update = result["split"]["learn"] / updates
    achieved = flops / max(learn_per_update, 1e-9) / 1e9
    return (f"train {config.env_name}: {result['sizes'].describe()}; {result['num_params']:,} params, "
            f"lstm={config.policy.lstm}, precision {config.device.precision}\n"
            f"  first update (compiles included) {result['first_update_s']:.2f} s; steady "
            f"{result['sps']:,.0f} SPS over {counted(updates, 'update')} ({split} of {result['elapsed_s']:.2f} s)\n"
            f"  update: {flops / 1e9:,.2f} GFLOP each by the 6N rule{stopped}, {achieved:,.1f} GFLOP/s achieved "
            f"({learn_per_update:.3f} s per update)")


def run_together(commands: list[list[str]], env: dict | None = None) -> list:
    """Runs ``commands`` side by side (the processes of one run over several) and returns their
    subprocess.CompletedProcess in order, stdout and stderr captured as text. Once one fails the others
    are killed (they would wait for it in a collective or at the coordinator until JAX's timeouts), and
    any exception here (Ctrl-C among them) kills every one still running before it goes on."""
    import subprocess
    import tempfile

    outputs = [(tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")) for _ in commands]
    procs = []
    try:
        for command, (out, err) in zip(commands, outputs):
            procs.append(subprocess.Popen(command, stdout=out, stderr=err, text=True, env=env))
        while any(proc.poll() is None for proc in procs):
            if any(proc.poll() for proc in procs):  # one failed: the rest cannot finish without it
                break
            time.sleep(0.1)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
    results = []
    for command, proc, (out, err) in zip(commands, procs, outputs):
        out.seek(0)
        err.seek(0)
        results.append(subprocess.CompletedProcess(command, proc.returncode, out.read(), err.read()))
        out.close()
        err.close()
    return results


def at_least(minimum: int):
    """An argparse type for the benchmark scripts: a whole number >= ``minimum``, else argparse's usage
    error (exit 2) naming the value."""
    import argparse

    def whole(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < minimum:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number >= {minimum}")
        return value

    return whole


def positive_number(text: str) -> float:
    """An argparse type for the benchmark scripts: a finite number > 0 (a time, a step count written
    20e6), else argparse's usage error (exit 2) naming the value."""
    import argparse
    import math

    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number > 0")
    return value


def script_main(main, prog: str) -> int:
    """Runs a benchmark script's ``main()``; a ConfigError (a flag the config refuses) is one line on
    stderr, "PROG: error: ...", and exit status 2 instead of a traceback; Ctrl-C is "PROG: interrupted"
    and exit status 130 (the figures printed so far stand)."""
    import sys

    from jaxlab.config import ConfigError

    try:
        main()
    except ConfigError as err:
        print(f"{prog}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    return 0

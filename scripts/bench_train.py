"""Training benchmark: compile time, steady SPS and time to a return threshold.

    python scripts/bench_train.py                      # cartpole defaults + SPS at 4,096 agents
    python scripts/bench_train.py --env pendulum --threshold -250
    python scripts/bench_train.py --sps-only --agents 4096 --flags --train.update-epochs 1
    python scripts/bench_train.py --scaling --agents 1024   # steady SPS on 1 and 2 devices, 2 processes

Time to threshold is wall time from the Trainer's start (the step's and the update's compiles included;
JAX's import and the Trainer's set-up excluded) until
the episode-weighted mean return over the last --window updates reaches --threshold.
Steady SPS excludes the first update (which compiles).
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import time

from jaxlab.cli.common import number
from jaxlab.run.bench import at_least, report_training, run_together, script_main
from jaxlab.run.loop import train_loop
from jaxlab.config import load_config
from jaxlab.messages import counted
from jaxlab.train.trainer import Trainer


class Threshold:
    """A train_loop hook: stops once the episode-weighted mean return over the last ``window`` updates
    that ended episodes reaches ``threshold``; remembers when (seconds from ``start``, step, mean)."""

    def __init__(self, threshold: float, window: int, start: float):
        self.threshold, self.window, self.start = threshold, window, start
        self.recent: list[tuple[float, int]] = []
        self.first_update: float | None = None
        self.reached: tuple[float, int, float] | None = None
        self.mean = float("nan")

    def __call__(self, trainer, record) -> bool:
        if self.first_update is None:
            self.first_update = time.perf_counter() - self.start
        if record["episodes"]:
            self.recent = (self.recent + [(record["episode_return"], record["episodes"])])[-self.window:]
        episodes = sum(n for _, n in self.recent)
        self.mean = sum(r * n for r, n in self.recent) / max(episodes, 1)
        if len(self.recent) == self.window and self.mean >= self.threshold:
            self.reached = (time.perf_counter() - self.start, record["global_step"], self.mean)
        return self.reached is not None


def run_to_threshold(env: str, threshold: float, window: int, flags: list[str]) -> None:
    config, _ = load_config(env, flags=flags)
    with Trainer(config) as trainer:
        start = trainer.start_time
        hook = Threshold(threshold, window, start)
        train_loop(trainer, [hook])
        elapsed = time.perf_counter() - start
        steady_steps = trainer.global_step - trainer.sizes.batch_size
        print(f"{env}: {trainer.sizes.describe()}; "
              f"{trainer.num_params:,} parameters, lstm={config.policy.lstm}")
        print(f"  first update (the compiles + one update): {hook.first_update:.2f} s")
        if steady_steps:
            print(f"  steady SPS: {steady_steps / max(elapsed - hook.first_update, 1e-9):,.0f}")
        else:  # it was printed as 0
            print("  steady SPS: none (the run stopped after its first update, which compiles)")
        if hook.reached:
            print(f"  mean return {hook.reached[2]:.1f} >= {threshold} over the last {counted(window, 'update')} after "
                  f"{hook.reached[0]:.1f} s and {hook.reached[1]:,} steps")
        else:
            print(f"  threshold {threshold} not reached in {trainer.global_step:,} steps ({elapsed:.1f} s); "
                  f"last mean {hook.mean:.1f}")


def sps_config(env: str, agents: int, updates: int, flags: list[str]):
    """The config of the steady-SPS run: ``agents`` agents (agents / the env's agents per env envs), 4
    minibatches (2 or 1 when the agents do not divide by 4), steps for 1 + ``updates`` updates, then
    ``flags``. ConfigError for agents that are not whole envs."""
    from jaxlab.config import ConfigError, derive_sizes
    from jaxlab.config.memory import env_shape

    probe_config, _ = load_config(env, flags=flags)
    horizon, per_env = probe_config.train.bptt_horizon, env_shape(probe_config).agents_per_env
    if agents % per_env:
        raise ConfigError(f"--agents {agents}: {env} has {per_env} agents per env, so the agents must be a "
                          f"multiple of {per_env}, e.g. --agents {per_env * max(1, agents // per_env)}")
    minibatches = next(n for n in (4, 2, 1) if agents % n == 0)
    base = ["--vec.num-envs", str(agents // per_env), "--train.total-timesteps", str(agents * horizon * (updates + 1)),
            "--train.minibatch-size", str(agents * horizon // minibatches)]
    config = load_config(env, flags=base + flags)[0]
    # the length in updates, as `jaxlab bench` gives it: too many is refused naming --updates, not the
    # --train.total-timesteps set above
    derive_sizes(config, per_env, updates=updates + 1)
    return config


def steady_sps(env: str, agents: int, updates: int, flags: list[str]) -> None:
    """Steady SPS at ``agents`` agents (see sps_config), the first update excluded."""
    print(report_training(sps_config(env, agents, updates, flags), updates))


def scaling(env_name: str, agents: int, updates: int, flags: list[str], counts=(1, 2)) -> None:
    """Steady SPS at ``agents`` agents on each device count of ``counts`` (device.count), each in its own
    process; on the CPU, XLA_FLAGS=--xla_force_host_platform_device_count makes the devices (they share
    the machine's cores, so this shows the cost of sharding there, not a speed-up)."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))  # unwinds: the runs are killed
    env = dict(os.environ)
    env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={max(counts)}".strip()
    base = None
    for count in counts:
        command = [sys.executable, __file__, "--env", env_name, "--sps-only", "--agents", str(agents),
                   "--updates", str(updates), "--flags", *flags, "--device.count", str(count)]
        result = subprocess.run(command, capture_output=True, text=True, env=env)
        found = re.search(r"steady ([\d,]+) SPS", result.stdout)
        if result.returncode != 0 or not found:
            print(f"  {count} device{'s' * (count > 1)}: failed: {(result.stderr.strip().splitlines() or ['?'])[-1]}")
            continue
        sps = int(found.group(1).replace(",", ""))
        base = sps if count == counts[0] else base  # the first count's SPS; none when that run failed
        print(f"  {count} device{'s' * (count > 1)}: {sps:,} SPS" + (f" ({sps / base:.2f}x)" if base else ""),
              flush=True)
    # 2 processes on this host, 1 device each (jax.distributed, gloo collectives on a CPU)
    from jaxlab.run.distributed import free_port

    port = free_port()
    env["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "")
    results = run_together([[sys.executable, __file__, "--env", env_name, "--sps-only", "--agents", str(agents),
                              "--updates", str(updates), "--flags", *flags, "--device.count", "1",
                              "--dist.coordinator", f"localhost:{port}", "--dist.num-processes", "2",
                              "--dist.process-id", str(i)] for i in range(2)], env=env)
    found = re.search(r"steady ([\d,]+) SPS", results[0].stdout)
    if any(result.returncode for result in results) or not found:
        failed = next((result for result in results if result.returncode not in (0, -signal.SIGKILL)), results[0])
        print(f"  2 processes: failed: {(failed.stderr.strip().splitlines() or ['?'])[-1]}")
    else:
        sps = int(found.group(1).replace(",", ""))
        print(f"  2 processes x 1 device: {sps:,} SPS" + (f" ({sps / base:.2f}x)" if base else ""), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="cartpole")
    parser.add_argument("--threshold", type=number, default=475.0)
    parser.add_argument("--window", type=at_least(1), default=5, help="updates averaged for the threshold")
    parser.add_argument("--agents", type=at_least(1), default=4096, help="agents for the steady-SPS run")
    parser.add_argument("--updates", type=at_least(1), default=3, help="timed updates in the steady-SPS run")
    parser.add_argument("--sps-only", action="store_true")
    parser.add_argument("--scaling", action="store_true", help="steady SPS on 1 and 2 devices (forced on a CPU)")
    parser.add_argument("--flags", nargs=argparse.REMAINDER, default=[], help="config flags, last")
    args = parser.parse_args()
    from jaxlab.run import distributed

    # a process of a run over several (--dist.* flags), before JAX starts
    distributed.start(args.flags, command="bench_train.py")
    if args.scaling:
        sps_config(args.env, args.agents, args.updates, args.flags)  # a bad flag or count: exit 2 before any run
        print(f"scaling {args.env}, {args.agents:,} agents, {args.updates} timed updates:", flush=True)
        scaling(args.env, args.agents, args.updates, args.flags)
        return
    if not args.sps_only:
        run_to_threshold(args.env, args.threshold, args.window, args.flags)
    steady_sps(args.env, args.agents, args.updates, args.flags)


if __name__ == "__main__":
    sys.exit(script_main(main, "bench_train.py"))

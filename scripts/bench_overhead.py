"""The rollout's Python overhead per step: what a step of Rollout.collect costs beyond the policy call
and the C step, measured side by side in one process.

    python scripts/bench_overhead.py                       # cartpole at 64 and 8,192 agents
    python scripts/bench_overhead.py --env target --agents 512 4096 --rollouts 50

For each agent count (agents, not envs: a multi-agent env gets agents / its agents per env envs; one
group, horizon 16, the trainer's own jitted step):
  step     wall time per step of Rollout.collect (the finish call spread over the T steps)
  policy   the same jitted policy step called alone back to back, waiting for its action each time
           (the jit dispatch included: that is the policy call's own cost)
  finish   the rollout's last call (the values of the observations after the T steps: one more policy
           forward) called alone, per step (divided by T)
  env      VecEnv.step alone with fixed actions (the ctypes call and the C step)
  overhead step - policy - finish - env: the action's copy to the host, the truncation check, the timers
           and the bookkeeping (the outputs' transfer is inside the policy call, which takes the host
           block); the issue's goal is under 30 us.
  in-run   the same overhead from the rollout's own timers in the same collect calls: the wall time
           less the time in policy calls (the step's and the finish's dispatch, and the wait for the
           action: a finish that runs after its dispatch returns is waited for by the next step) and
           in C steps. It does not subtract two large figures measured at different moments (at 64
           agents a policy call is about 0.5 ms, and 5% of noise between the step and policy
           columns is 25 us), but it does not see a policy call that is slower inside the rollout
           than alone either.
  python   the rollout's own Python and numpy work alone: Rollout.collect with the policy's step and finish
           replaced by stubs that return outputs computed beforehand, less the C steps. On a CPU, in-run
           exceeds it at large agent counts because a large policy call evicts the caches the statements
           after it need (a numpy any() over 400 flags took 54 us right after an 8,192-agent policy call,
           1 us warm); an accelerator computes elsewhere.
Each figure is the median of --repeats measurements of --rollouts rollouts each. Prints a table.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import jax
import numpy as np

from jaxlab.run.bench import at_least, script_main


def measure(env_name: str, agents: int, rollouts: int, repeats: int) -> dict[str, float]:
    from jaxlab.config import ConfigError, load_config
    from jaxlab.config.memory import EnvShape
    from jaxlab.env import spaces_of
    from jaxlab.train.trainer import Trainer

    try:
        per_env = EnvShape.of(spaces_of(env_name)).agents_per_env
    except ValueError as err:  # an unknown env
        raise ConfigError(f"--env {env_name}: {err}") from None
    if agents % per_env:
        raise ConfigError(f"--agents {agents}: {env_name} has {per_env} agents per env, so the agents must be a "
                          f"multiple of {per_env}, e.g. --agents {per_env * max(1, agents // per_env)}")
    config, _ = load_config(env_name, flags=["--vec.num-envs", str(agents // per_env), "--vec.num-threads", "1",
                                             "--train.bptt-horizon", "16", "--train.minibatch-size", str(agents * 16),
                                             "--train.total-timesteps", str(agents * 16 * 1000),
                                             "--device.compile-cache", "off"])
    with Trainer(config) as trainer:
        rollout, params, env = trainer.rollout, trainer.acting_params, trainer.envs[0]
        T = rollout.horizon
        rollout.collect(params)  # compile and warm up
        steps, policies, finishes, envs, in_run = [], [], [], [], []
        for _ in range(repeats):
            before = dict(rollout.timing)
            tic = time.perf_counter()
            for _ in range(rollouts):
                segment, _ = rollout.collect(params)
            jax.block_until_ready(segment.values)
            steps.append((time.perf_counter() - tic) / (rollouts * T))
            timed = sum(rollout.timing[k] - before[k] for k in ("policy", "env"))
            in_run.append(steps[-1] - timed / (rollouts * T))

            packed, final = rollout._inputs(0)
            carry, buffers, key = rollout.carries[0], rollout.buffers, jax.random.PRNGKey(0)
            zero = np.int32(0)
            tic = time.perf_counter()
            for t in range(rollouts * T):
                carry, action, buffers = rollout._step(params, carry, buffers, packed, final, np.int32(t % T), zero,
                                                       key, np.int32(t))
                action.block_until_ready()
            policies.append((time.perf_counter() - tic) / (rollouts * T))
            tic = time.perf_counter()
            for _ in range(rollouts):
                buffers, value = rollout._finish(params, carry, buffers, packed, final, np.int32(T), zero)
                value.block_until_ready()
            finishes.append((time.perf_counter() - tic) / (rollouts * T))
            rollout.carries[0], rollout.buffers = carry, buffers

            actions = np.asarray(action)
            tic = time.perf_counter()
            for _ in range(rollouts * T):
                env.step(actions)
            envs.append((time.perf_counter() - tic) / (rollouts * T))
        bookkeeping = [stubbed_overhead(rollout, params, rollouts) for _ in range(repeats)]
    step, policy, finish, env_step, untimed, python = (statistics.median(x) for x in (
        steps, policies, finishes, envs, in_run, bookkeeping))
    return {"step": step, "policy": policy, "finish": finish, "env": env_step,
            "overhead": step - policy - finish - env_step, "in_run": untimed, "bookkeeping": python}


def stubbed_overhead(rollout, params, rollouts: int) -> float:
    """Seconds per step of Rollout.collect beyond its C steps when the policy's step and finish are stubs
    that return outputs computed beforehand at once: the rollout's own Python and numpy work (the action's
    conversion, the flag checks, the timers, the loop), without the policy call, its dispatch or its wait,
    and without the cache refill that follows a large policy call on a CPU."""
    step, finish = rollout._step, rollout._finish
    packed, final = rollout._inputs(0)
    zero = np.int32(0)
    carry, action, buffers = step(params, rollout.carries[0], rollout.buffers, packed, final, zero, zero,
                                  rollout.group_keys()[0], zero)
    buffers, value = finish(params, carry, buffers, packed, final, np.int32(rollout.horizon), zero)
    jax.block_until_ready((carry, action, value))
    rollout._step = lambda *args: (carry, action, buffers)
    rollout._finish = lambda *args: (buffers, value)
    try:
        env_before = rollout.timing["env"]
        tic = time.perf_counter()
        for _ in range(rollouts):
            rollout.collect(params)
        wall = time.perf_counter() - tic
        return (wall - (rollout.timing["env"] - env_before)) / (rollouts * rollout.horizon)
    finally:
        rollout._step, rollout._finish, rollout.buffers = step, finish, buffers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="cartpole")
    parser.add_argument("--agents", type=at_least(1), nargs="+", default=[64, 8192])
    parser.add_argument("--rollouts", type=at_least(1), default=40, help="rollouts per measurement (default 40)")
    parser.add_argument("--repeats", type=at_least(1), default=5, help="measurements per figure (default 5)")
    args = parser.parse_args()
    print(f"{args.env}, one group, horizon 16, 1 C thread; jax {jax.__version__} on {jax.devices()[0].platform}; "
          f"median of {args.repeats} x {args.rollouts} rollouts")
    print(f"{'agents':>8} {'step us':>9} {'policy us':>10} {'finish us':>10} {'env us':>8} {'overhead us':>12} "
          f"{'in-run us':>10} {'python us':>10}")
    for agents in args.agents:
        r = measure(args.env, agents, args.rollouts, args.repeats)
        print(f"{agents:>8,} {r['step'] * 1e6:>9.1f} {r['policy'] * 1e6:>10.1f} {r['finish'] * 1e6:>10.1f} "
              f"{r['env'] * 1e6:>8.1f} "
              f"{r['overhead'] * 1e6:>12.1f} {r['in_run'] * 1e6:>10.1f} {r['bookkeeping'] * 1e6:>10.1f}")


if __name__ == "__main__":
    sys.exit(script_main(main, "bench_overhead.py"))

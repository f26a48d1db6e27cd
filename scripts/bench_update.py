"""The PPO update on this machine against its matmul peak, measured in the same run.

    python scripts/bench_update.py [--agents 4096] [--horizon 16] [--minibatch 16384] [--epochs 1]
                                   [--hidden 128] [--unroll 1 4 16] [--precision float32]
                                   [--flags --policy.activation relu ...]

Prints the peak of a plain matmul in --precision (float32, or bfloat16 inputs accumulating float32) of
the LSTM gates' shape, the update's biggest: [x, h] [minibatch / horizon, 2H] x [W_x; W_h] [2H, 4H],
and for each scan unroll the update's time, its achieved GFLOP/s and the fraction of the peak. FLOPs
are the matmuls' by the 6N rule: every weight of the network takes part in one multiply-add per
sample forward and two backward, so 6 x params FLOPs per sample and epoch (0.79 MFLOP for cartpole's
LSTM-128; biases, activations and the optimizer are left out), over the epochs that ran (train.target_kl may stop
an update's early, as `jaxlab bench` counts them). XLA's cost analysis is no help here:
it counts the body of a loop (the LSTM's scan, the minibatch loop) once. Speed figures only; asserts
nothing.
"""

from __future__ import annotations

import argparse
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.run.bench import at_least, script_main


def matmul_peak(m: int, k: int, n: int, dtype: str = "float32", seconds: float = 2.0) -> float:
    """GFLOP/s of a jitted [m, k] x [k, n] matmul of ``dtype`` inputs accumulating and returning float32,
    the best of repeated timed batches."""
    a = jnp.ones((m, k), dtype)
    b = jnp.ones((k, n), dtype)
    f = jax.jit(lambda a, b: jnp.dot(a, b, preferred_element_type=jnp.float32))
    f(a, b).block_until_ready()
    best, end = 0.0, time.perf_counter() + seconds
    while time.perf_counter() < end:
        tic = time.perf_counter()
        for _ in range(10):
            out = f(a, b)
        out.block_until_ready()
        best = max(best, 10 * 2 * m * k * n / (time.perf_counter() - tic) / 1e9)
    return best


def config_of(args, unroll: int):
    """The cartpole config of these sizes (--flags last, so they may change any), its sizes checked:
    ConfigError before anything is timed."""
    from jaxlab.config import derive_sizes, load_config
    from jaxlab.config.memory import env_shape

    num_envs = args.agents
    flags = ["--vec.num-envs", str(num_envs), "--train.bptt-horizon", str(args.horizon), "--train.minibatch-size",
             str(args.minibatch), "--train.update-epochs", str(args.epochs), "--policy.hidden-size", str(args.hidden),
             "--policy.scan-unroll", str(unroll), "--device.precision", args.precision,
             "--train.total-timesteps", str(num_envs * args.horizon * 100), *args.flags]
    config, _ = load_config("cartpole", flags=flags)
    derive_sizes(config, env_shape(config).agents_per_env)
    return config


def update_figures(args, unroll: int) -> tuple[float, float, float, str]:
    """(seconds per update, FLOPs per update, samples x epochs per update, a note on the epochs) of the real
    update at these sizes, the last three from the config as built (--flags may change the batch or the epochs)
    and the epochs the fastest timed update ran (its epochs_run: those train.target_kl skipped cost nothing,
    as `jaxlab bench` counts them)."""
    from jaxlab.run.bench import kl_stop_note, update_flops
    from jaxlab.train.trainer import Trainer

    with Trainer(config_of(args, unroll)) as trainer:
        trainer.evaluate()
        segment = trainer.segment
        key = jax.random.PRNGKey(0)
        norm = trainer.norm.state
        state = trainer.state
        state, _, _ = trainer._update(state, norm, segment, key)
        jax.block_until_ready(state)
        times, epochs_run = [], []
        for _ in range(args.repeats):
            tic = time.perf_counter()
            state, _, metrics = trainer._update(state, norm, segment, key)
            jax.block_until_ready(metrics)
            times.append(time.perf_counter() - tic)
            epochs_run.append(int(metrics["epochs_run"]))
        fastest = int(np.argmin(times))  # its time with its own epochs
        epochs = epochs_run[fastest]
        flops = update_flops(trainer.num_params, trainer.sizes.batch_size, epochs)
        note = kl_stop_note(epochs, trainer.config.train.update_epochs, "in the fastest update")
        return times[fastest], flops, trainer.sizes.batch_size * epochs, note


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--agents", type=at_least(1), default=4096)
    parser.add_argument("--horizon", type=at_least(1), default=16)
    parser.add_argument("--minibatch", type=at_least(1), default=16384)
    parser.add_argument("--epochs", type=at_least(1), default=1)
    parser.add_argument("--hidden", type=at_least(1), default=128)
    parser.add_argument("--unroll", type=at_least(1), nargs="+", default=[1, 4, 16])
    parser.add_argument("--precision", choices=("float32", "bfloat16"), default="float32")
    parser.add_argument("--repeats", type=at_least(1), default=3)
    parser.add_argument("--flags", nargs=argparse.REMAINDER, default=[], help="more config flags, last")
    args = parser.parse_args()
    config = config_of(args, args.unroll[0])  # a bad flag: one line (script_main) before the peak's 2 s
    t, hidden, precision = config.train, config.policy.hidden_size, config.device.precision
    rows = t.minibatch_size // t.bptt_horizon  # an LSTM step's gate matmul in the update, as --flags made it
    peak = matmul_peak(rows, 2 * hidden, 4 * hidden, precision)
    print(f"{jax.devices()[0].device_kind}: {precision} matmul [{rows}, {2 * hidden}] x "
          f"[{2 * hidden}, {4 * hidden}] peak {peak:,.1f} GFLOP/s")
    for unroll in args.unroll:
        seconds, flops, samples, note = update_figures(args, unroll)
        achieved = flops / seconds / 1e9
        print(f"unroll {unroll:>3}: update {seconds * 1e3:8.1f} ms for {samples:,.0f} samples x epochs{note}; "
              f"{flops / 1e9:.2f} GFLOP ({flops / samples / 1e6:.2f} MFLOP/sample); {achieved:,.1f} GFLOP/s = "
              f"{achieved / peak:.0%} of the matmul peak")


if __name__ == "__main__":
    sys.exit(script_main(main, "bench_update.py"))

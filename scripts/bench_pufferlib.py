"""jaxlab against PufferLib 3's PuffeRL, side by side on this machine, at the sizes of issue 13's table.

    python scripts/bench_pufferlib.py --puffer-python /path/to/venv/bin/python [--rounds 3] [--updates 5]
                                      [--precision float32|bfloat16]

Both train CartPole at 4,096 agents, horizon 16, one epoch, minibatches of 16,384, with the same network
(Linear 4 -> 128 + GELU, LSTM-128, policy and value heads) on the CPU: jaxlab with its C cartpole and
cartpole.toml's other settings; PufferLib with PuffeRL from pufferlib-core 3.0.23 (torch, eager, no
compile) and a vectorised numpy CartPole written here as a native PufferEnv (pufferlib-core ships no
C envs; at 4,096 agents its step is a small share of either side's time). Each round runs each side
once in a fresh process, alternating which goes first; a run is one warm-up update (compiles for
jaxlab), then --updates timed ones. Prints every run and the medians: steady SPS, the rollout's and
the update's seconds per 65,536-step update, and jaxlab / PufferLib. --precision bfloat16 runs both in
mixed precision: jaxlab with --device.precision bfloat16 (matmul inputs bfloat16, forward and backward),
PufferLib with its precision = "bfloat16" (torch.autocast on the CPU).

PufferLib is no dependency of jaxlab: --puffer-python names a Python that has it, made with e.g.
    python -m venv /tmp/pvenv && /tmp/pvenv/bin/pip install pufferlib-core==3.0.23 gymnasium
(pufferlib 3.0.0 itself downloads raylib while it builds, so it cannot install offline).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys

from jaxlab.run.bench import at_least, positive_number

JAXLAB = r'''
import json, sys
from jaxlab.config import load_config
from jaxlab.run.bench import steady_training
updates, precision = int(sys.argv[1]), sys.argv[2]
config, _ = load_config("cartpole", flags=["--vec.num-envs", "4096", "--train.bptt-horizon", "16",
                                           "--train.update-epochs", "1", "--train.minibatch-size", "16384",
                                           "--train.total-timesteps", str(4096 * 16 * 100),
                                           "--device.precision", precision])
r = steady_training(config, updates)
print(json.dumps({"sps": r["sps"], "rollout_s": (r["elapsed_s"] - r["split"]["learn"]) / updates,
                  "update_s": r["split"]["learn"] / updates, "first_s": r["first_update_s"]}))
'''

PUFFERLIB = r'''
import json, sys, time
import gymnasium, numpy as np, torch
import pufferlib, pufferlib.models, pufferlib.pufferl as pufferl


class VecCartPole(pufferlib.PufferEnv):
    """Gymnasium's CartPole-v1 dynamics for N agents at once in numpy (float64 state, float32 outputs)."""

    def __init__(self, num_envs, seed=0):
        self.single_observation_space = gymnasium.spaces.Box(-np.inf, np.inf, (4,), np.float32)
        self.single_action_space = gymnasium.spaces.Discrete(2)
        self.num_agents = self.agents_per_batch = num_envs
        super().__init__(None)
        self.rng = np.random.default_rng(seed)
        self.state = np.zeros((num_envs, 4))
        self.t = np.zeros(num_envs, np.int32)

    def reset(self, seed=None):
        self.state[:] = self.rng.uniform(-0.05, 0.05, self.state.shape)
        self.t[:] = 0
        self.observations[:] = self.state
        self.infos = []
        return self.observations, self.infos

    def step(self, actions):
        x, xd, th, thd = self.state.T
        force = np.where(actions == 1, 10.0, -10.0)
        ct, st = np.cos(th), np.sin(th)
        temp = (force + 0.05 * thd * thd * st) / 1.1
        tha = (9.8 * st - ct * temp) / (0.5 * (4.0 / 3.0 - 0.1 * ct * ct / 1.1))
        xa = temp - 0.05 * tha * ct / 1.1
        self.state[:] = np.stack([x + 0.02 * xd, xd + 0.02 * xa, th + 0.02 * thd, thd + 0.02 * tha], 1)
        self.t += 1
        term = (np.abs(self.state[:, 0]) > 2.4) | (np.abs(self.state[:, 2]) > 0.2095)
        trunc = self.t >= 500
        done = term | trunc
        self.rewards[:] = 1.0
        self.terminals[:] = term
        self.truncations[:] = trunc
        if done.any():
            self.state[done] = self.rng.uniform(-0.05, 0.05, (int(done.sum()), 4))
            self.t[done] = 0
        self.observations[:] = self.state
        self.infos = []
        return self.observations, self.rewards, self.terminals, self.truncations, self.infos


updates, precision = int(sys.argv[1]), sys.argv[2]
env = VecCartPole(4096)
policy = pufferlib.models.LSTMWrapper(env, pufferlib.models.Default(env, 128), 128, 128)
config = dict(torch_deterministic=False, seed=0, batch_size="auto", bptt_horizon=16, device="cpu",
              cpu_offload=False, use_rnn=True, minibatch_size=16384, max_minibatch_size=32768, update_epochs=1,
              compile=False, compile_mode="default", compile_fullgraph=True, optimizer="adam", learning_rate=3e-3,
              adam_beta1=0.9, adam_beta2=0.999, adam_eps=1e-8, total_timesteps=4096 * 16 * 100,
              precision=precision, prio_alpha=0.0, prio_beta0=0.2, clip_coef=0.2, vf_clip_coef=0.2, vf_coef=0.5,
              ent_coef=0.0, max_grad_norm=0.5, gamma=0.99, gae_lambda=0.95, vtrace_rho_clip=1.0,
              vtrace_c_clip=1.0, anneal_lr=True, checkpoint_interval=10**9, data_dir="/tmp", env="cartpole")
trainer = pufferl.PuffeRL(config, env, policy)
trainer.print_dashboard = lambda *a, **k: None
try:
    tic = time.perf_counter()
    trainer.evaluate(); trainer.train()
    first = time.perf_counter() - tic
    rollout = update = 0.0
    for _ in range(updates):
        a = time.perf_counter(); trainer.evaluate(); b = time.perf_counter(); trainer.train(); c = time.perf_counter()
        rollout += b - a; update += c - b
finally:
    trainer.utilization.stop()  # PuffeRL's monitoring thread, else the process never exits
print(json.dumps({"sps": updates * 65536 / (rollout + update), "rollout_s": rollout / updates,
                  "update_s": update / updates, "first_s": first, "torch": torch.__version__}))
'''


def puffer_problem(python: str, timeout: float = 120) -> str | None:
    """Why ``python`` cannot run the PufferLib side (not an executable file, or it cannot import what that
    side imports), or None; checked before any run, as the first PufferLib run may come minutes in."""
    if shutil.which(python) is None:
        return "not an executable file"
    try:
        result = subprocess.run([python, "-c", "import gymnasium, torch, pufferlib.models, pufferlib.pufferl"],
                                capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"it did not import pufferlib within {timeout:g} s"
    except OSError as err:
        return f"it cannot be run ({err.strerror})"
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or [f"exit status {result.returncode}"])[-1]
        return f"it cannot import pufferlib-core's trainer ({last})"
    return None


def run(python: str, code: str, updates: int, precision: str, timeout: float) -> dict:
    """One run in a fresh process: the JSON line it prints last."""
    result = subprocess.run([python, "-c", code, str(updates), precision], capture_output=True, text=True,
                            timeout=timeout)
    if result.returncode != 0:
        raise SystemExit(f"bench_pufferlib.py: {python} failed (exit {result.returncode}):\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--puffer-python", required=True, help="a Python with pufferlib-core 3.0.23 and torch")
    parser.add_argument("--rounds", type=at_least(1), default=3)
    parser.add_argument("--updates", type=at_least(1), default=5, help="timed updates per run (after one warm-up)")
    parser.add_argument("--timeout", type=positive_number, default=600, help="seconds per run")
    parser.add_argument("--precision", choices=("float32", "bfloat16"), default="float32",
                        help="matmul precision of both sides (default float32)")
    args = parser.parse_args()
    problem = puffer_problem(args.puffer_python)
    if problem:
        parser.error(f"--puffer-python {args.puffer_python}: {problem}; make a Python with PufferLib, e.g. `python "
                     "-m venv /tmp/pvenv && /tmp/pvenv/bin/pip install pufferlib-core==3.0.23 gymnasium`, and pass "
                     "--puffer-python /tmp/pvenv/bin/python")
    sides = {"jaxlab": (sys.executable, JAXLAB), "pufferlib": (args.puffer_python, PUFFERLIB)}
    runs: dict[str, list[dict]] = {name: [] for name in sides}
    for r in range(args.rounds):
        for name in (("jaxlab", "pufferlib") if r % 2 == 0 else ("pufferlib", "jaxlab")):
            python, code = sides[name]
            figures = run(python, code, args.updates, args.precision, args.timeout)
            runs[name].append(figures)
            print(f"round {r + 1} {name:>9}: {figures['sps']:>9,.0f} SPS  rollout {figures['rollout_s']:.3f} s  "
                  f"update {figures['update_s']:.3f} s per 65,536 steps  first update {figures['first_s']:.2f} s",
                  flush=True)
    med = {name: {k: statistics.median(f[k] for f in fs) for k in ("sps", "rollout_s", "update_s", "first_s")}
           for name, fs in runs.items()}
    print(f"\nmedians of {args.rounds} rounds, {args.updates} timed updates each, {args.precision} (torch "
          f"{runs['pufferlib'][0].get('torch', '?')}):")
    print(f"{'':>10} {'SPS':>9} {'rollout s':>10} {'update s':>9} {'first s':>8}")
    for name, m in med.items():
        print(f"{name:>10} {m['sps']:>9,.0f} {m['rollout_s']:>10.3f} {m['update_s']:>9.3f} {m['first_s']:>8.2f}")
    print(f"jaxlab / PufferLib steady SPS: {med['jaxlab']['sps'] / med['pufferlib']['sps']:.2f}")


if __name__ == "__main__":
    main()

"""Trial processes: what each of K parallel trials gets of the machine, the `jaxlab train` command of a
trial's run, starting it as a child process, and following its metrics.jsonl.

On a CPU the cores the sweep may use are split into K disjoint sets, one per slot; a child is pinned
to its slot's cores (sched_setaffinity, right after it starts, long before it imports JAX) and gets
as many C threads (vec.num_threads) as it has cores, and XLA_FLAGS with that thread count and Eigen
single-threaded. The pinning is what bounds a child here: with jaxlib 0.10 on this CPU those flags
changed neither the thread count (17 threads either way) nor any result (measured). On
a GPU every child gets device.memory_fraction = 0.9 / K (XLA_PYTHON_CLIENT_MEM_FRACTION before JAX
starts) and a 1/K share of the cores for its C threads.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from jaxlab.config.presets import MEMORY_ENV_VARS  # XLA's memory variables (set in the sweep process too)
from jaxlab.messages import counted

CPU_XLA_FLAGS = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads={threads}"


@dataclass(frozen=True)
class Slot:
    """What one of K parallel trials gets: ``cores`` it is pinned to (None: not pinned), C threads,
    a GPU memory fraction (None on a CPU), and the environment variables set for it."""

    index: int
    cores: tuple[int, ...] | None
    num_threads: int
    memory_fraction: float | None
    env: dict = field(default_factory=dict)

    def flags(self, python_env: bool = False) -> list[str]:
        """Config flags of a trial in this slot (they change no result); no C threads for a ``python_env``,
        whose envs step in the calling thread (the flag would be a warning that it does nothing)."""
        flags = [] if python_env else ["--vec.num-threads", str(self.num_threads)]
        if self.memory_fraction is not None:
            flags += ["--device.memory-fraction", str(self.memory_fraction)]
        return flags

    def describe(self) -> str:
        if self.memory_fraction is not None:
            return f"{self.memory_fraction:.0%} of GPU memory, {counted(self.num_threads, 'C thread')}"
        return f"cores {','.join(map(str, self.cores))}" if self.cores else "all cores"


def plan_slots(parallel: int, on_gpu: bool, cores: list[int], max_threads: int) -> list[Slot]:
    """K = ``parallel`` slots. CPU: the cores split into K contiguous sets (cores shared round-robin
    when K exceeds them), C threads = the set's size (at most ``max_threads``, the config's
    vec.num_threads) and XLA's thread count likewise; GPU: memory fraction 0.9 / K (three decimals)
    and len(cores) // K C threads (at least 1, at most ``max_threads``)."""
    slots = []
    for i in range(parallel):
        if on_gpu:
            threads = max(1, min(max_threads, len(cores) // parallel))
            slots.append(Slot(i, None, threads, round(0.9 / parallel, 3)))
            continue
        if parallel == 1:
            own = tuple(cores)
        elif parallel >= len(cores):
            own = (cores[i % len(cores)],)
        else:
            per = len(cores) // parallel
            own = tuple(cores[i * per:(i + 1) * per]) if i < parallel - 1 else tuple(cores[i * per:])
        threads = max(1, min(max_threads, len(own)))
        env = {"XLA_FLAGS": CPU_XLA_FLAGS.format(threads=len(own))} if parallel > 1 else {}
        slots.append(Slot(i, own if parallel > 1 else None, threads, None, env))
    return slots


def child_environment(slot: Slot, base_env: dict) -> dict:
    """The environment of a trial in ``slot``: ``base_env`` (the sweep's environment as it was when the
    command started, before jaxlab set XLA's memory variables for the sweep process itself) with the
    slot's variables. XLA_FLAGS the user set come first; XLA memory variables the user set win."""
    env = dict(base_env)
    for key, value in slot.env.items():
        env[key] = f"{base_env[key]} {value}" if key == "XLA_FLAGS" and base_env.get(key) else value
    if slot.memory_fraction is not None and not any(v in base_env for v in MEMORY_ENV_VARS):
        env["XLA_PYTHON_CLIENT_MEM_FRACTION"] = str(slot.memory_fraction)
    # the child imports this jaxlab, wherever the sweep was started from
    root = str(Path(__file__).resolve().parent.parent.parent)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def wandb_group_flags(config, study_name: str) -> list[str]:
    """``--log.wandb-group STUDY`` for the trials of a study whose base ``config`` logs to wandb with no
    group of its own (so that a project's trials are told apart by study), else []."""
    if config.log.wandb and not config.log.wandb_group:
        return ["--log.wandb-group", study_name]
    return []


def train_command(env_name: str, run_dir: Path, base_config: Path, params_flags: list[str], seed: int,
                  slot: Slot, notes: str, resume: bool, searched: frozenset[str] = frozenset()) -> list[str]:
    """The `jaxlab train` arguments of one run of a trial: a new run on the study's base config with
    the trial's values and seed, or ``resume`` the run in ``run_dir`` from its newest checkpoint.
    ``searched``: the study's searched keys (--sweep-searched): a key that one of them turns off in this
    trial (target_kl with update_epochs 1) does something in others, so the trial's output does not name it."""
    from jaxlab.env import is_python_env

    slot_flags = slot.flags(is_python_env(env_name))
    study_flags = ["--sweep-searched", ",".join(sorted(searched))] if searched else []
    if resume:
        return ["train", env_name, "--resume", str(run_dir), "--run-dir", str(run_dir), *slot_flags, *study_flags]
    return ["train", env_name, "--config", str(base_config), *params_flags, "--train.seed", str(seed),
            *slot_flags, "--run-dir", str(run_dir), "--notes", notes, *study_flags]


def start(args: list[str], slot: Slot, env: dict, log_path: Path) -> subprocess.Popen:
    """Starts ``jaxlab ARGS`` (through jaxlab.sweep.child, which ends it when the sweep dies) in its own
    session, pinned to the slot's cores; stdout and stderr go to ``log_path``."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        process = subprocess.Popen([sys.executable, "-m", "jaxlab.sweep.child", str(os.getpid()), *args],
                                   stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
                                   start_new_session=True)
    if slot.cores:
        try:
            os.sched_setaffinity(process.pid, slot.cores)
        except OSError:
            pass  # it ended already; its exit status tells why
    return process


class MetricsFollower:
    """Reads the records a run appends to its metrics.jsonl, as they come; a file that shrank (a resumed
    run drops the records after its checkpoint) is read again from the start. ``records`` maps the
    update number to its record."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.offset = 0
        self.records: dict[int, dict] = {}

    def poll(self) -> bool:
        """Reads complete new lines; True when there were any."""
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            return False
        if size < self.offset:
            self.offset, self.records = 0, {}
        if size == self.offset:
            return False
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            chunk = f.read(size - self.offset)
        end = chunk.rfind(b"\n") + 1
        for line in chunk[:end].splitlines():
            if line.strip():
                record = json.loads(line)
                self.records[record["update"]] = record
        self.offset += end
        return end > 0

    def ordered(self) -> list[dict]:
        return [self.records[u] for u in sorted(self.records)]


def last_line(path: Path, limit: int = 400) -> str:
    """The last non-empty line of a text file (a failed child's error), at most ``limit`` characters."""
    try:
        lines = [line for line in Path(path).read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return lines[-1][:limit] if lines else ""

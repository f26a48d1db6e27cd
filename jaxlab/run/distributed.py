"""Start-up of a run over several processes (hosts) on JAX's own runtime: ``jax.distributed.initialize``
before anything else uses JAX, from the [dist] keys or the environment.

    jaxlab train ENV --dist.coordinator HOST:PORT --dist.num-processes N --dist.process-id I

Each process steps its own envs (its share of vec.num_envs) on its local devices; the update runs
over every process's devices at once (see jaxlab.train.parallel). Every process runs the same
jaxlab.run.loop.train_run: process 0 writes the records, and every process takes part in the
checkpoints (Orbax multi-host saves, see jaxlab.train.process_state) and in a resume, which needs
the same process count as the checkpoint.
Where a key is not given: JAXLAB_COORDINATOR for the coordinator, SLURM_NTASKS and SLURM_PROCID for
the count and the index (under SLURM with no coordinator, JAX's own SLURM detection finds one, and a
--dist.* flag that disagrees with SLURM's count or index is refused).
On a CPU the processes' collectives go through gloo.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from jaxlab.config.schema import ConfigError, DistConfig


@dataclass(frozen=True)
class Settings:
    coordinator: str   # HOST:PORT, or "" for JAX's own detection (SLURM)
    num_processes: int
    process_id: int
    count: Given | None = field(default=None, compare=False)  # where num_processes came from (for a fix)
    join_timeout_s: int = field(default=300, compare=False)  # how long initialize waits for the others


@dataclass(frozen=True)
class Given:
    """dist.num_processes or dist.process_id as resolved, with where it came from (for an error)."""
    key: str      # "dist.num_processes" or "dist.process_id"
    value: int
    source: str   # "flag" (--dist.*), "env" (the variable ``variable``) or "default" (neither set)
    variable: str  # SLURM_NTASKS or SLURM_PROCID

    @property
    def flag(self) -> str:
        return "--" + self.key.replace("_", "-")

    def origin(self) -> str:
        """Where the value came from, as a parenthesis after it ("" for a flag: the key names it)."""
        if self.source == "env":
            return f" (from {self.variable}, as {self.flag} is not given)"
        if self.source == "default":
            return f" (the default: neither {self.flag} nor {self.variable} is set)"
        return ""

    def __str__(self) -> str:
        return f"{self.key}={self.value}{self.origin()}"


def given(dist_value: int, unset: int, key: str, variable: str, default: int, environ: Mapping[str, str]) -> Given:
    """``dist_value`` (a --dist.* flag's) unless it is ``unset``; else the environment's ``variable``, else
    ``default``; ConfigError when the variable is not an integer."""
    if dist_value != unset:
        return Given(key, dist_value, "flag", variable)
    if variable not in environ:
        return Given(key, default, "default", variable)
    try:
        return Given(key, int(environ[variable]), "env", variable)
    except ValueError:
        raise ConfigError(f"{variable}={environ[variable]!r} is not an integer (it gives {key}); unset it or give "
                          f"--{key.replace('_', '-')} {'N' if key == 'dist.num_processes' else 'I'}") from None


def out_of_range_fix(pid: Given, n: Given, environ: Mapping[str, str]) -> str:
    """The fix for a process index ``pid`` not in 0..n-1, by where each came from."""
    ids = f"0..{n.value - 1}" if n.value > 1 else "0"
    if pid.source == "flag" and n.source == "flag":
        return (f"give each process its own --dist.process-id in {ids}, or set --dist.num-processes to the run's "
                f"process count (above {pid.value})")
    if pid.source == "flag" and n.source == "env":
        return f"give --dist.process-id in {ids}, or leave it out to take SLURM_PROCID"
    if pid.source == "flag":
        return (f"give every process --dist.num-processes N (the run's process count, above {pid.value}) and "
                "--dist.coordinator HOST:PORT, or leave out --dist.process-id for a one-process run")
    if n.source == "flag":
        tasks = f" (SLURM_NTASKS={environ['SLURM_NTASKS']})" if "SLURM_NTASKS" in environ else ""
        return (f"set --dist.num-processes to the job's task count{tasks} or leave it out, or give "
                "--dist.process-id")
    if n.source == "env":
        return ("SLURM_PROCID and SLURM_NTASKS disagree: launch each process with srun (which sets both), or give "
                "--dist.num-processes and --dist.process-id")
    return "set SLURM_NTASKS to the job's task count, or give --dist.num-processes N and --dist.process-id"


def resolve(dist: DistConfig, environ: Mapping[str, str] = os.environ) -> Settings:
    """The settings of ``dist`` with the environment filling what it leaves out; ConfigError when they
    do not make a run, naming each count or index with where it came from (a --dist.* flag, SLURM_NTASKS
    or SLURM_PROCID, the default)."""
    if dist.process_id < -1:
        raise ConfigError(f"dist.process_id={dist.process_id} must be -1 (from SLURM_PROCID, else 0) or a "
                          f"process's index from 0, e.g. --dist.process-id 0")
    n = given(dist.num_processes, 0, "dist.num_processes", "SLURM_NTASKS", 1, environ)
    pid = given(dist.process_id, -1, "dist.process_id", "SLURM_PROCID", 0, environ)
    coordinator = dist.coordinator or environ.get("JAXLAB_COORDINATOR", "")
    if n.value < 1:
        fix = ("e.g. --dist.num-processes 2 (or leave it out: SLURM_NTASKS, else 1)" if n.source == "flag" else
               "unset SLURM_NTASKS, or give --dist.num-processes N")
        raise ConfigError(f"{n} must be at least 1; {fix}")
    if not 0 <= pid.value < n.value:
        processes = f"the processes are 0..{n.value - 1}" if n.value > 1 else "its one process is 0"
        raise ConfigError(f"{pid} is out of range for {n}: {processes}; "
                          f"{out_of_range_fix(pid, n, environ)}")
    if n.value > 1 and not coordinator and "SLURM_JOB_ID" not in environ:
        alone = " (or --dist.num-processes 1 to run alone)" if n.source == "env" else ""
        raise ConfigError(f"{n} needs process 0's address: --dist.coordinator HOST:PORT (or JAXLAB_COORDINATOR), "
                          f"the same for every process{alone}")
    if n.value > 1 and not coordinator:  # SLURM_JOB_ID is set: JAX finds process 0 from the job's nodes
        check_in_slurm_job_step(n, environ)
        check_agrees_with_slurm((n, pid), environ)
    host, _, port = coordinator.rpartition(":")
    if coordinator and (not host or not port.isdigit() or not 1 <= int(port) <= 65535):
        raise ConfigError(f"dist.coordinator={coordinator!r} must be HOST:PORT with a port in 1..65535, e.g. "
                          f"--dist.coordinator node0:12345")
    if dist.coordinator and n.value == 1:
        raise ConfigError(f"dist.coordinator={dist.coordinator!r} is given but the run has 1 process{n.origin()}; "
                          f"give every process --dist.num-processes N (N >= 2) and its --dist.process-id, or leave "
                          f"out --dist.coordinator")
    return Settings(coordinator, n.value, pid.value, n, join_timeout(environ) if n.value > 1 else 300)


def join_timeout(environ: Mapping[str, str]) -> int:
    """Seconds a process waits in initialize for the run's other processes: JAXLAB_JOIN_TIMEOUT, else 300
    (JAX's own default); ConfigError when it is not a whole number above 0."""
    text = environ.get("JAXLAB_JOIN_TIMEOUT", "300")
    if not text.strip().isdigit() or int(text) < 1:
        raise ConfigError(f"JAXLAB_JOIN_TIMEOUT={text!r} must be a whole number of seconds above 0 (how long a "
                          "process waits for the run's others); e.g. JAXLAB_JOIN_TIMEOUT=300, or unset it")
    return int(text)


# What JAX's SLURM detection (jax._src.clusters.SlurmCluster) reads; srun sets them all in each task of a job step,
# an allocation's own shell (salloc, an sbatch script outside srun) only some.
SLURM_STEP_VARIABLES = ("SLURM_JOB_ID", "SLURM_STEP_NODELIST", "SLURM_NTASKS", "SLURM_PROCID", "SLURM_LOCALID")


def check_in_slurm_job_step(n: Given, environ: Mapping[str, str]) -> None:
    """ConfigError when a run of ``n`` processes with no coordinator is not in a SLURM job step: JAX finds
    process 0 from the step's variables only when every one of SLURM_STEP_VARIABLES is set, and raised a bare
    ValueError ('coordinator_address should be defined') otherwise."""
    missing = [variable for variable in SLURM_STEP_VARIABLES if variable not in environ]
    if not missing:
        return
    alone = ", or --dist.num-processes 1 to run alone" if n.source == "env" else ""
    raise ConfigError(f"{n} needs process 0's address, which JAX finds under SLURM only in a task that srun "
                      f"launched ({', '.join(missing)} not set here: not a job step); launch it with "
                      f"srun --ntasks {n.value} jaxlab ..., or give every process --dist.coordinator HOST:PORT{alone}")


def check_agrees_with_slurm(values: Sequence[Given], environ: Mapping[str, str]) -> None:
    """ConfigError when a --dist.* flag among ``values`` gives another count or index than SLURM's variable
    (SLURM_NTASKS, SLURM_PROCID) in a run with no coordinator: JAX then joins the tasks SLURM launched,
    finding process 0 from the job's nodes, so flags that disagree with SLURM cannot make the run."""
    for value in values:
        if value.source != "flag" or value.variable not in environ:
            continue
        slurm = environ[value.variable]
        if slurm.strip() == str(value.value):
            continue
        raise ConfigError(f"{value} disagrees with {value.variable}={slurm}: with no --dist.coordinator the run's "
                          f"processes are the tasks SLURM launched (JAX finds process 0 from the job's nodes); leave "
                          f"out {value.flag}, or give every process --dist.coordinator HOST:PORT to run the processes "
                          "the flags name")


def dist_from_flags(flags: Sequence[str]) -> DistConfig:
    """The [dist] keys among command-line ``flags`` (--dist.coordinator X, --dist.num-processes=N ...),
    read before the config is loaded: loading it may look at the devices, after which JAX can no
    longer join other processes."""
    values: dict[str, str] = {}
    flags = list(flags)
    for i, flag in enumerate(flags):
        if not flag.startswith("--dist."):
            continue
        name, eq, value = flag[len("--dist."):].partition("=")
        if not eq:
            value = flags[i + 1] if i + 1 < len(flags) else ""
        values[name.replace("-", "_")] = value
    def integer(name: str, default: int) -> int:
        text = values.get(name, str(default))
        try:
            return int(text)
        except ValueError:
            flag, example = "--dist." + name.replace("_", "-"), 2 if name == "num_processes" else 0
            raise ConfigError(f"{flag} {text!r} is not an integer; e.g. {flag} {example}") from None

    return DistConfig(coordinator=values.get("coordinator", ""), num_processes=integer("num_processes", 0),
                      process_id=integer("process_id", -1))


def initialize(settings: Settings, command: str = "jaxlab") -> bool:
    """Joins the run's processes (``jax.distributed.initialize``) when there are several; True then.
    Call before anything else uses JAX. When they have not all joined within ``settings.join_timeout_s``,
    prints ``command: error: ...`` (one line naming the fix) and ends the process with status 2: JAX's own
    timeout aborts it with a fatal log and a C stack instead (its deadline is set a minute later)."""
    if settings.num_processes == 1:
        return False
    check_coordinator_host(settings)
    check_coordinator_port(settings)
    import threading

    import jax

    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    if settings.process_id > 0:  # process 0 starts the coordinator; the others wait for it, silently otherwise
        print(f"process {settings.process_id} of {settings.num_processes}: joining the run's coordinator "
              f"{coordinator_words(settings)}…", file=sys.stderr, flush=True)
    watchdog = threading.Timer(settings.join_timeout_s, stop_unjoined, (settings, command))
    watchdog.daemon = True
    watchdog.start()
    deadline = settings.join_timeout_s + 60
    try:
        if settings.coordinator:
            jax.distributed.initialize(coordinator_address=settings.coordinator, num_processes=settings.num_processes,
                                       process_id=settings.process_id, initialization_timeout=deadline)
        else:  # SLURM: JAX finds process 0 from the job's nodes; the count and index are resolve's (SLURM's)
            jax.distributed.initialize(num_processes=settings.num_processes, process_id=settings.process_id,
                                       initialization_timeout=deadline)
    finally:
        watchdog.cancel()
    return True


def check_coordinator_host(settings: Settings) -> None:
    """ConfigError when the coordinator's host name is not known here (a typo, a name of another network):
    the process waited for it until the join timeout instead."""
    if not settings.coordinator:
        return
    import socket

    host, _, port = settings.coordinator.rpartition(":")
    try:
        socket.getaddrinfo(host.strip("[]"), int(port), type=socket.SOCK_STREAM)
    except OSError as err:
        raise ConfigError(f"dist.coordinator={settings.coordinator!r}: host {host!r} is not known here "
                          f"({err.strerror or err}); give process 0's host name or address, the same for every "
                          f"process (e.g. --dist.coordinator localhost:{port} when all run on this host)") from None


def check_coordinator_port(settings: Settings, environ: Mapping[str, str] = os.environ) -> None:
    """ConfigError when this process is process 0 and cannot listen on the coordinator's port (another program
    holds it): JAX's coordinator service then crashed it, a segmentation fault after gRPC's 'Failed to add port
    to server'. JAX listens on every address of the host ([::]:PORT) unless JAX_COORDINATOR_BIND_ADDRESS says
    otherwise, which is then left to JAX. Under SLURM (no coordinator given) the port is JAX's: slurm_port."""
    if settings.process_id != 0 or environ.get("JAX_COORDINATOR_BIND_ADDRESS"):
        return
    host, _, port = settings.coordinator.rpartition(":")
    number = int(port) if settings.coordinator else slurm_port(environ)
    problem = port_bind_problem(number) if number is not None else None
    if not problem:
        return
    if settings.coordinator:
        raise ConfigError(f"dist.coordinator={settings.coordinator!r}: process 0 cannot start the run's coordinator "
                          f"on port {port} of this host ({problem}: another program, or another process given "
                          f"--dist.process-id 0, listens there); give each process its own --dist.process-id, or "
                          f"every process another port, e.g. --dist.coordinator {host}:{free_port()}")
    source = ("JAX_COORDINATOR_PORT" if environ.get("JAX_COORDINATOR_PORT") else
              f"JAX's choice for SLURM_JOB_ID={environ['SLURM_JOB_ID']}")
    raise ConfigError(f"process 0 cannot start the run's coordinator on port {number} of this host "
                      f"({problem}; the port is {source}); set JAX_COORDINATOR_PORT to a free port for every task "
                      f"(e.g. JAX_COORDINATOR_PORT={free_port()}), or give every process --dist.coordinator HOST:PORT")


def slurm_port(environ: Mapping[str, str]) -> int | None:
    """The coordinator's port that JAX's SLURM detection takes (jax._src.clusters.SlurmCluster): JAX_COORDINATOR_PORT,
    else one in 61440..65535 from SLURM_JOB_ID; None when neither is a number (left to JAX)."""
    text = environ.get("JAX_COORDINATOR_PORT") or ""
    if text.isdigit():
        return int(text)
    job = environ.get("SLURM_JOB_ID", "")
    return int(job) % 2**12 + (65535 - 2**12 + 1) if not text and job.isdigit() else None


def port_bind_problem(port: int) -> str | None:
    """Why a socket cannot listen on ``port`` of every address of this host (as JAX's coordinator does), or
    None when it can. Like gRPC, it listens on IPv6's [::] (IPv4's addresses too) where the kernel has IPv6,
    else on IPv4's 0.0.0.0: a host booted with ipv6.disable=1 has no AF_INET6 sockets, whatever Python's
    socket.has_ipv6 (how Python was built) says."""
    import socket

    try:
        probe, address = socket.socket(socket.AF_INET6, socket.SOCK_STREAM), "::"
    except OSError:  # EAFNOSUPPORT: no IPv6 in this kernel
        probe, address = None, ""
    try:
        with probe or socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gRPC: a port in TIME_WAIT is free
            probe.bind((address, port))
            probe.listen()
    except OSError as err:
        return err.strerror or str(err)
    return None


def free_port() -> int:
    """A port nothing listens on now (for a fix's example)."""
    import socket

    with socket.socket() as probe:
        probe.bind(("", 0))
        return probe.getsockname()[1]


def coordinator_words(settings: Settings) -> str:
    """Where the run's coordinator is, for a message: "at HOST:PORT", or "(from SLURM)"."""
    return f"at {settings.coordinator}" if settings.coordinator else "(from SLURM)"


def unjoined_message(settings: Settings) -> str:
    """The line for a process whose run's processes did not all join within settings.join_timeout_s."""
    n, pid, waited = settings.num_processes, settings.process_id, settings.join_timeout_s
    if not settings.coordinator:
        start = f"launch the {n} tasks in one job step (srun --ntasks {n}, which sets SLURM_NTASKS and SLURM_PROCID)"
    elif pid == 0:
        others = "--dist.process-id 1" if n == 2 else f"each its own --dist.process-id in 1..{n - 1}"
        start = (f"start the other processes with the same command, --dist.num-processes {n} and {others}, where "
                 f"they reach {settings.coordinator}")
    else:
        start = (f"start process 0 (--dist.process-id 0) with the same command on the host of {settings.coordinator} "
                 f"and every other process with --dist.num-processes {n}, and check that it is reachable from here")
    return (f"process {pid} of {n}: the run's processes did not all join {coordinator_words(settings)} within "
            f"{waited} s (JAXLAB_JOIN_TIMEOUT); {start}")


def stop_unjoined(settings: Settings, command: str) -> None:
    """Ends this process (status 2) with unjoined_message: called from a thread while the main thread waits
    in jax.distributed.initialize's C code, which a raised exception would not reach; nothing is saved yet."""
    sys.stdout.flush()
    print(f"{command}: error: {unjoined_message(settings)}", file=sys.stderr, flush=True)
    os._exit(2)


def settings_from_flags(flags: Sequence[str] = (), environ: Mapping[str, str] = os.environ) -> Settings:
    """The settings of the [dist] ``flags`` with the environment filling what they leave out; ConfigError
    when they do not make a run. What `jaxlab train` checks before JAX starts, and `jaxlab config` too
    (its dry run: nothing is joined)."""
    return resolve(dist_from_flags(flags), environ)


def start(flags: Sequence[str] = (), environ: Mapping[str, str] = os.environ, command: str = "jaxlab") -> Settings:
    """Resolves the [dist] flags and the environment (settings_from_flags) and initializes; returns the
    settings. ``command`` heads the line of a run whose processes did not all join (initialize)."""
    settings = settings_from_flags(flags, environ)
    initialize(settings, command)
    return settings


def is_primary() -> bool:
    """Whether this process writes the run's records and what else is written once (a checkpoint's
    files.json): process 0; always in a one-process run."""
    import jax

    return jax.process_index() == 0


def sync_processes(name: str) -> None:
    """In a run over several processes, waits until every process has called it with ``name``."""
    import jax

    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices(f"jaxlab {name}")


def any_process(*flags: bool) -> tuple[bool, ...]:
    """Each flag true in any process of the run (one small all-gather; every process must call it, in
    step); the flags themselves in a one-process run."""
    import jax

    if jax.process_count() == 1:
        return tuple(bool(f) for f in flags)
    import numpy as np
    from jax.experimental import multihost_utils

    gathered = np.asarray(multihost_utils.process_allgather(np.array(flags, np.int32)))
    return tuple(bool(f) for f in gathered.reshape(jax.process_count(), len(flags)).any(axis=0))


def from_process_0(text: str) -> str:
    """Process 0's ``text`` in every process (a broadcast; every process must call it, in step, with a
    text of the same length in bytes); ``text`` itself in a one-process run."""
    import jax

    if jax.process_count() == 1:
        return text
    import numpy as np
    from jax.experimental import multihost_utils

    data = np.frombuffer(text.encode(), np.uint8)
    return np.asarray(multihost_utils.broadcast_one_to_all(data)).astype(np.uint8).tobytes().decode()


def keys_that_differ(values: Mapping[str, str]) -> dict[int, list[str]]:
    """{process: the keys of ``values`` (e.g. a resolved config's, {"train.learning_rate": "0.0003", ...})
    whose value differs from process 0's} for each process with any: one all-gather of a fixed-shape
    [K, 32] uint8 array, each value's SHA-256, so every process must call it, in step, with the same K
    keys in the same order (the config schema's), and every process gets the same answer; {} in a
    one-process run."""
    import hashlib

    import jax

    if jax.process_count() == 1:
        return {}
    import numpy as np
    from jax.experimental import multihost_utils

    digests = np.stack([np.frombuffer(hashlib.sha256(value.encode()).digest(), np.uint8)
                        for value in values.values()])  # [K, 32]
    gathered = np.asarray(multihost_utils.process_allgather(digests))
    return differing_keys(gathered.reshape(jax.process_count(), len(values), -1), list(values))


def differing_keys(digests, keys: Sequence[str]) -> dict[int, list[str]]:
    """{process: the ``keys`` whose digest differs from process 0's} for each process with any;
    ``digests``: [P, K, D], process p's digest of key k in row [p, k]."""
    import numpy as np

    differs = (np.asarray(digests) != np.asarray(digests)[:1]).any(axis=2)  # [P, K]
    return {p: [keys[k] for k in np.flatnonzero(differs[p])] for p in range(1, len(differs)) if differs[p].any()}


def processes_on_this_host() -> int:
    """The run's processes on this host, this one included (they share its memory): one all-gather of
    each process's host name's SHA-256 (socket.gethostname), so every process must call it, in step;
    1 in a one-process run."""
    import hashlib
    import socket

    import jax

    if jax.process_count() == 1:
        return 1
    import numpy as np
    from jax.experimental import multihost_utils

    digest = np.frombuffer(hashlib.sha256(socket.gethostname().encode()).digest(), np.uint8)  # [32]
    gathered = np.asarray(multihost_utils.process_allgather(digest))
    return same_host_count(gathered.reshape(jax.process_count(), -1), jax.process_index())


def same_host_count(digests, index: int) -> int:
    """How many processes have process ``index``'s host digest (it included); ``digests``: [P, D], process
    p's digest of its host name in row p."""
    import numpy as np

    digests = np.asarray(digests)
    return int((digests == digests[index]).all(axis=1).sum())

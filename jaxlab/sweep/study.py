"""The Optuna side of a sweep: storage, the study (created once, with its search space and base config
stored in it), sampler and pruner, suggesting a trial's values, and the objective computed from a
run's metrics records. Optuna is imported here and in results.py only.

Objective of one run (one seed): the mean of ``spec.metric`` over the metrics records whose
``global_step`` lies in the last ``average_last`` of the run's agent-steps, an episode statistic weighted
by each record's episodes (so it is the mean over those episodes; records of updates that ended no episode
do not count); a trial's score is the mean over its seeds, and its
cost (objective "score,cost") the mean of its runs' seconds of training without JAX's compiles (run_cost),
which depend on the compile cache.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import math
import warnings
import zlib
from pathlib import Path

from jaxlab.config import ConfigError
from jaxlab.config.validate import shown_value
from jaxlab.messages import counted, install_extra, short_repr
from jaxlab.observe.records import episode_statistics
from jaxlab.sweep.space import SweepSpec

JOURNAL = "study.journal"


def quiet_optuna() -> None:
    """Optuna logs every trial at INFO and warns about experimental APIs; the sweep prints its own lines."""
    import optuna

    optuna.logging.set_verbosity(logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)


def shown_storage(url: str) -> str:
    """A --storage URL as the sweep prints it: its password, if any, as *** (postgresql://USER:***@HOST/DB),
    the rest as given; a placeholder for a URL SQLAlchemy cannot parse."""
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - SQLAlchemy's ArgumentError or a value error: never print it raw
        return "<your --storage URL>"


def storage_for(url: str | None, study_dir: Path):
    """The Optuna storage: ``url`` None means Optuna's journal file STUDY_DIR/study.journal (safe for
    several processes on one machine); postgresql://, mysql:// and sqlite:// URLs are RDB storages (many
    machines on one database). postgresql:// is given to SQLAlchemy as postgresql+psycopg:// (psycopg 3)."""
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    if url is None:
        study_dir.mkdir(parents=True, exist_ok=True)
        return JournalStorage(JournalFileBackend(str(study_dir / JOURNAL)))
    if url.startswith("postgresql://") or url.startswith("postgres://"):
        url = "postgresql+psycopg://" + url.split("://", 1)[1]
    if not any(url.startswith(p) for p in ("postgresql", "mysql", "sqlite")):
        raise ConfigError(f"--storage {shown_storage(url)!r} is not a database URL; use postgresql://USER:PASSWORD@HOST/DB, "
                          "mysql+pymysql://..., or leave it out for the study's journal file")
    try:
        return _rdb_storage(url)
    except (ImportError, ModuleNotFoundError) as err:
        raise ConfigError(f"--storage {url.split('://')[0]}: its database driver is missing ({err}); "
                          f"{install_extra('sweep')} (psycopg for PostgreSQL) or pymysql for MySQL") from None
    except optuna.exceptions.StorageInternalError as err:
        raise ConfigError(f"--storage: cannot use the database ({str(err).splitlines()[0]}); check the URL, "
                          "that the server runs and that the database exists") from None
    except Exception as err:  # noqa: BLE001 - SQLAlchemy's OperationalError and friends: one line
        raise ConfigError(f"--storage: cannot connect ({type(err).__name__}: {str(err).splitlines()[0]}); "
                          "check the URL and that the server runs") from None


def _rdb_storage(url: str, tries: int = 5):
    """RDBStorage(url). Sweeps started together on a new database race to create Optuna's tables (the
    loser's CREATE TABLE fails on a duplicate key); the loser tries again once the tables exist."""
    import time

    from optuna.storages import RDBStorage
    from sqlalchemy.exc import IntegrityError, ProgrammingError

    for attempt in range(tries):
        try:
            return RDBStorage(url)
        except (IntegrityError, ProgrammingError):
            if attempt == tries - 1:
                raise
            time.sleep(0.5 * (attempt + 1))
    raise AssertionError("unreachable")


def make_sampler(spec: SweepSpec, seed: int | None = None):
    """TPE (single or multi-objective; constant liar so that parallel trials spread out) or CMA-ES."""
    import optuna

    if spec.sampler == "cmaes":
        return optuna.samplers.CmaEsSampler(n_startup_trials=spec.startup_trials, seed=seed)
    return optuna.samplers.TPESampler(n_startup_trials=spec.startup_trials, seed=seed, constant_liar=True,
                                      multivariate=True)


def make_pruner(spec: SweepSpec):
    """Median (after ``startup_trials`` trials, and from the first report at or past ``warmup`` of a
    run) or Hyperband over the
    ``reports`` steps of a run; none for multi-objective studies (Optuna prunes on one value)."""
    import optuna

    if spec.pruner == "none" or spec.multi_objective:
        return optuna.pruners.NopPruner()
    if spec.pruner == "hyperband":
        return optuna.pruners.HyperbandPruner(min_resource=1, max_resource=spec.reports, reduction_factor=3)
    return optuna.pruners.MedianPruner(n_startup_trials=max(spec.startup_trials, 1),
                                       n_warmup_steps=math.ceil(spec.warmup * spec.reports))


#: Attributes a study's creator stores, "sweep" last: a study whose attrs hold "sweep" is complete.
STUDY_ATTRS = ("env_name", "base_config", "sweep")

#: How long a sweep waits for another process that created the same study to store its attributes.
CREATION_WAIT_S = 60.0


def open_study(name: str, storage, spec: SweepSpec | None, base_toml: str | None, env_name: str,
               wait_s: float = CREATION_WAIT_S, again: str | None = None):
    """(study, spec, base config TOML) of study ``name``: created with ``spec`` and ``base_toml`` stored
    in it when new; when it exists, its stored spec and base are returned (a spec or base given that
    differs is a ConfigError naming the first difference). ``spec`` None: the study must exist.

    Two sweeps started together on one storage may both find no study: Optuna creates it once, and the
    creator stores its attributes one at a time. The other waits up to ``wait_s`` seconds for them
    (a study without them after that, e.g. its creator was killed, is completed with ``spec``). ``again``: the
    command that resumes the study as it is (a refusal names it), by default `jaxlab sweep ENV --study NAME`."""
    import optuna

    try:
        summaries = {s.study_name: s for s in optuna.get_all_study_summaries(storage, include_best_trial=False)}
    except Exception as err:  # noqa: BLE001 - a broken journal or database: one line
        raise ConfigError(f"cannot read the study storage ({type(err).__name__}: {str(err).splitlines()[0]})") from None
    attrs = summaries[name].user_attrs if name in summaries else None
    if attrs is None:
        if spec is None:
            known = ", ".join(sorted(summaries)) or "none"
            raise ConfigError(f"no study {name!r} in this storage (studies: {known}); run a sweep first: "
                              f"jaxlab sweep {env_name} --study {name}")
        try:
            optuna.create_study(study_name=name, storage=storage, directions=spec.directions,
                                sampler=make_sampler(spec), pruner=make_pruner(spec))
            attrs, wait_s = {}, 0.0  # this process created it: nobody else stores its attributes
        except optuna.exceptions.DuplicatedStudyError:  # another sweep created it since get_all_study_summaries
            attrs = {}
    attrs = _complete_attrs(name, storage, attrs, wait_s)
    if "sweep" not in attrs:
        if spec is None:
            raise ConfigError(f"study {name!r} was never completed: its creator stopped before storing its sweep "
                              f"file; run `jaxlab sweep {env_name} --study {name} --sweep FILE` to complete it")
        values = {"env_name": env_name, "base_config": base_toml, "sweep": spec.to_dict()}
        study = optuna.load_study(study_name=name, storage=storage)
        for key in STUDY_ATTRS:
            study.set_user_attr(key, values[key])
        attrs = optuna.load_study(study_name=name, storage=storage).user_attrs
    stored_env = attrs.get("env_name", env_name)
    if stored_env != env_name:
        raise ConfigError(f"study {name!r} is a sweep of {stored_env!r}, not {env_name!r}; "
                          f"run `jaxlab sweep {stored_env} --study {name}`")
    stored = SweepSpec.from_dict(attrs["sweep"])
    stored_base = attrs["base_config"]
    if spec is not None:
        check_same(name, spec, stored, base_toml, stored_base, again or f"jaxlab sweep {env_name} --study {name}")
    study = optuna.load_study(study_name=name, storage=storage, sampler=make_sampler(stored),
                              pruner=make_pruner(stored))
    return study, stored, stored_base


def _complete_attrs(name: str, storage, attrs: dict, wait_s: float) -> dict:
    """The study's user attrs once they hold "sweep" (read again every 0.2 s), or as they are after
    ``wait_s`` seconds."""
    import time

    import optuna

    deadline = time.monotonic() + wait_s
    while "sweep" not in attrs and time.monotonic() < deadline:
        time.sleep(0.2)
        attrs = optuna.load_study(study_name=name, storage=storage).user_attrs
    return attrs


#: Settings a resumed sweep may change: they shape how many trials run (and how many at once), not what a trial is.
RUN_SETTINGS = ("trials", "parallel", "source", "flags")


def check_same(name: str, spec: SweepSpec, stored: SweepSpec, base_toml: str | None, stored_base: str,
               again: str = "jaxlab sweep ENV --study NAME") -> None:
    """ConfigError when a resumed study is given another search space, scoring or base config; the fix it
    names includes ``again``, the command that resumes the study as it is."""
    from dataclasses import fields

    for f in fields(SweepSpec):
        if f.name in RUN_SETTINGS or getattr(spec, f.name) == getattr(stored, f.name):
            continue
        if f.name == "params":
            raise ConfigError(f"study {name!r} was created with another search space "
                              f"({params_change(stored.params, spec.params)}); resume it with the same sweep file "
                              f"(or `{again}` alone), or start a new --study")
        if f.name == "seeds":  # a trial's score is the mean over its seeds: one study, one count
            given = f"--seeds {spec.seeds}" if "seeds" in spec.flags else f"seeds = {spec.seeds} in {spec.source}"
            raise ConfigError(f"study {name!r} was created with {counted(stored.seeds, 'seed')} per trial, "
                              f"not {spec.seeds} "
                              f"({given}): its trials' scores must average as many seeds; resume it with --seeds "
                              f"{stored.seeds}, or start a new --study")
        if f.name in spec.flags:
            old = getattr(stored, f.name)
            raise ConfigError(f"study {name!r} was created with {f.name} = {short_repr(old, 120)}, not --{f.name} "
                              f"{getattr(spec, f.name)}; resume it with --{f.name} {old}, or "
                              "start a new --study")
        stored_value, value = (short_repr(getattr(s, f.name), 120) for s in (stored, spec))
        raise ConfigError(f"study {name!r} was created with {f.name} = {stored_value}, not {value}; resume it "
                          f"with the same sweep file and options (or `{again}` alone), or "
                          "start a new --study")
    if base_toml is not None and base_toml != stored_base:
        from jaxlab.config import config_from_toml
        from jaxlab.train.trainer import config_changes

        changes = [c for c in config_changes(config_from_toml(stored_base), config_from_toml(base_toml))
                   if not c[0].startswith(("log.", "checkpoint.")) and c[0] != "preset"]
        if changes:
            key, old, new = changes[0]
            raise ConfigError(f"study {name!r} was created with {key} = {shown_value(old)}, not {shown_value(new)}; "
                              f"resume it with the same --preset/--config/flags (or `{again}` alone), or start a new "
                              "--study")


def params_change(old: tuple, new: tuple) -> str:
    """The first difference between a study's hyperparameters ``old`` and ``new`` ones (Params), readably:
    "train.learning_rate: float 0.0003..0.01 log, not float 0.001..0.01 log"."""
    olds, news = {p.name: p for p in old}, {p.name: p for p in new}
    for p in old:
        if p.name not in news:
            return f"{p.name}: {p.short()}, which the new space lacks"
        if news[p.name] != p:
            return f"{p.name}: {p.short()}, not {news[p.name].short()}"
    for p in new:
        if p.name not in olds:
            return f"no {p.name}, which the new space adds: {p.short()}"
    return f"its keys in the order {', '.join(olds)}, not {', '.join(news)}"


def suggest(trial, spec: SweepSpec) -> dict:
    """The trial's values of every hyperparameter ({"section.key": value}), from the sampler."""
    values = {}
    for p in spec.params:
        if p.kind == "categorical":
            values[p.name] = trial.suggest_categorical(p.name, list(p.choices))
        elif p.kind == "int":
            values[p.name] = trial.suggest_int(p.name, p.low, p.high, step=p.step or 1, log=p.log)
        else:
            values[p.name] = trial.suggest_float(p.name, p.low, p.high, step=p.step, log=p.log)
    return values


def window_mean(records: list[dict], metric: str, end_step: int, width: float) -> float | None:
    """Mean of ``metric`` over ``records`` (metrics.jsonl objects) with end_step - width < global_step
    <= end_step, each weighted by record_weight (an episode statistic by the episodes behind it), skipping
    records where it is None or whose weight is 0; None when no record in the window counts."""
    weighted = [(r[metric], record_weight(r, metric)) for r in records
                if end_step - width < r["global_step"] <= end_step and r.get(metric) is not None]
    total = sum(weight for _, weight in weighted)
    return sum(value * weight for value, weight in weighted) / total if total else None


def record_weight(record: dict, metric: str) -> int:
    """How much ``record``'s ``metric`` counts in a window mean: for one of the env's episode statistics (a mean
    over the record's "episodes" episodes), that count, so that an update that ended 40 episodes weighs 40 times
    one that ended 1, and one that ended none nothing; 1 for a trainer metric (one value per update) and for a
    record without an episode count."""
    return record["episodes"] if metric in episode_statistics(record) else 1


def run_score(records: list[dict], spec: SweepSpec, total_steps: int) -> float | None:
    """The objective of one finished run: window_mean over its last ``average_last`` of ``total_steps``."""
    if not records:
        return None
    return window_mean(records, spec.metric, records[-1]["global_step"], spec.average_last * total_steps)


def run_cost(records: list[dict]) -> float | None:
    """The cost of one finished run (objective score,cost): its updates times the mean seconds of an update
    that compiled nothing, so that neither a warm compile cache nor a cold one changes it. A record's time is
    its wall_time less the record before's (the first's: its own); a record that compiled is a process's first
    (it holds compile_cache: the run's start and each resume) or one whose compiles count changed. The last
    record's wall_time (compiles included) when every update compiled (a one-update run); None without records."""
    if not records:
        return None
    seconds, updates, before = 0.0, 0, None
    for record in records:
        compiled = "compile_cache" in record or before is None or record.get("compiles") != before.get("compiles")
        if not compiled:
            seconds += record["wall_time"] - before["wall_time"]
            updates += record["update"] - before["update"]
        before = record
    if updates <= 0:
        return float(records[-1]["wall_time"])
    return seconds / updates * records[-1]["update"]


def report_step(record: dict, total_steps: int, reports: int) -> int:
    """How many of a run's ``reports`` report points (at each 1/reports of ``total_steps``) its record
    has passed: 0 before the first, ``reports`` at the last update."""
    return min(reports, record["global_step"] * reports // total_steps)


@contextlib.contextmanager
def ask_lock(storage, study_name: str, lock_dir: Path):
    """Held while a sweep process counts the study's trials and asks for a new one, so that sweeps
    sharing the study never ask for more than its target: a PostgreSQL advisory lock (or MySQL's
    GET_LOCK) for a database storage, shared by every machine; a file lock in ``lock_dir`` otherwise."""
    engine = getattr(storage, "engine", None)
    dialect = engine.dialect.name if engine is not None else None
    if dialect in ("postgresql", "mysql"):
        import sqlalchemy

        key = zlib.crc32(f"jaxlab sweep {study_name}".encode())
        take, give = (("SELECT pg_advisory_lock(:k)", "SELECT pg_advisory_unlock(:k)") if dialect == "postgresql"
                      else ("SELECT GET_LOCK(:k, -1)", "SELECT RELEASE_LOCK(:k)"))
        with engine.connect() as connection:
            connection.execute(sqlalchemy.text(take), {"k": key if dialect == "postgresql" else str(key)})
            try:
                yield
            finally:
                connection.execute(sqlalchemy.text(give), {"k": key if dialect == "postgresql" else str(key)})
        return
    lock_dir.mkdir(parents=True, exist_ok=True)
    with open(lock_dir / "ask.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield

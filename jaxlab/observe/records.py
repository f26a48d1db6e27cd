"""A run's records beside config.toml and metrics.jsonl: run.json (version, git revision, host,
devices, command), notes.md (the run's hypothesis), summary.json (final and best metrics, wall time,
steps, SPS), and the table `jaxlab runs` prints from them."""

from __future__ import annotations

import fnmatch
import json
import math
import platform
import re
import socket
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import jaxlab
from jaxlab.messages import plural


def git_revision(where: Path) -> str | None:
    """The git commit of ``where`` (with +dirty when the tree has changes), or None outside git."""
    try:
        rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=where, capture_output=True, text=True, timeout=5)
        if rev.returncode != 0:
            return None
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=where,
                               capture_output=True, text=True, timeout=5)
        return rev.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return None


EARLIER_KEYS = ("started", "command", "host", "jaxlab_version", "git_revision", "devices")


def write_run_info(run_dir: Path, config, devices: list[str], notes: str | None = None,
                   argv: list[str] | None = None) -> dict:
    """Writes run.json (and notes.md when ``notes``); returns what run.json holds. A resume keeps the
    EARLIER_KEYS of the run.json it replaces under "earlier" (one entry per earlier start)."""
    import jax

    run_dir = Path(run_dir)
    info = {"jaxlab_version": jaxlab.__version__,
            "git_revision": git_revision(Path(jaxlab.__file__).resolve().parent),
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "host": socket.gethostname(),
            "platform": platform.platform(), "python": sys.version.split()[0], "jax_version": jax.__version__,
            "devices": devices, "command": argv if argv is not None else sys.argv,
            "env_name": config.env_name, "preset": config.preset,
            "run_name": config.log.run_name or run_dir.name}
    previous = _read_json(run_dir / "run.json")  # a resumed run's: its earlier starts are kept, oldest first
    if previous:
        info["earlier"] = [*previous.get("earlier", []), {k: previous.get(k) for k in EARLIER_KEYS}]
    (run_dir / "run.json").write_text(json.dumps(info, indent=2) + "\n")
    if notes:
        (run_dir / "notes.md").write_text(notes.rstrip() + "\n")
    return info


def json_safe(value):
    """``value`` with each NaN or infinite float (in dicts and lists too) as None: JSON has neither, and
    json.dumps would write NaN, which strict readers (jq, JavaScript, Go, ...) refuse."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


START_KEYS = ("compile_cache", "launch_to_first_update_s")  # in the first record of each process


def episode_statistics(record: dict) -> dict:
    """The env's episode statistics in ``record``: the keys after "episodes", up to the time split (the
    order the trainer writes them in)."""
    keys = list(record)
    stats = {}
    for key in keys[keys.index("episodes") + 1:] if "episodes" in record else []:
        if key.startswith("time_"):
            break
        stats[key] = record[key]
    return stats


def _number(value) -> int | float | None:
    """``value`` when it is a number (not a bool), else None: a hand-edited or foreign record's field."""
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def is_update_record(record: dict) -> bool:
    """Whether ``record`` is an update's record as jaxlab writes it: numeric update, global_step and
    wall_time (a metrics.jsonl of another program, in a folder `jaxlab runs` lists, has other keys)."""
    return all(_number(record.get(key)) is not None for key in ("update", "global_step", "wall_time"))


def interrupted_at_once(summary: dict) -> bool:
    """Whether a run's summary.json says that a second Ctrl-C (SIGINT) stopped it at once, part way through
    an update or its compile: `jaxlab train` records that as a stop and as ``error`` "KeyboardInterrupt: ".
    It is a stop, not a failure: the run continues from its newest checkpoint (there may be none)."""
    return bool(summary.get("stopped")) and str(summary.get("error") or "").startswith("KeyboardInterrupt")


def last_return(records: list[dict]) -> tuple[int, float] | None:
    """(update, episode_return) of the last update record (is_update_record) that ended episodes and
    logged a numeric episode_return, else None."""
    for record in reversed(records):
        if is_update_record(record) and record.get("episodes") and _number(record.get("episode_return")) is not None:
            return record["update"], record["episode_return"]
    return None


def summarize(records: list[dict], best_metric: str = "episode_return") -> dict:
    """Final and best metrics of a run's records (one per update, as in metrics.jsonl); records that are
    not update records (is_update_record) are left out."""
    records = [r for r in records if is_update_record(r)]
    if not records:
        return {"updates": 0, "global_step": 0, "wall_time": 0.0, "sps": 0.0, "final": {}, "best": None}
    last = records[-1]
    with_episodes = [r for r in records if r.get("episodes") and _number(r.get(best_metric)) is not None]
    final = {k: v for k, v in last.items() if not k.startswith("time_") and k not in START_KEYS}
    if with_episodes:  # the episode statistics of the last update that ended episodes
        final.update({k: v for k, v in episode_statistics(with_episodes[-1]).items() if final.get(k) is None})
    best = max(with_episodes, key=lambda r: r[best_metric]) if with_episodes else None
    # after each process's first update (a resumed run's compiles again): the updates whose record does
    # not open a process, each timed from the record before it
    steady = [(a, b) for a, b in zip(records, records[1:]) if "launch_to_first_update_s" not in b]
    steady_steps = sum(b["global_step"] - a["global_step"] for a, b in steady)
    steady_time = sum(b["wall_time"] - a["wall_time"] for a, b in steady)
    starts = [{"update": r["update"], "launch_to_first_update_s": r["launch_to_first_update_s"],
               "compile_cache": r["compile_cache"]} for r in records if "launch_to_first_update_s" in r]
    return {"updates": last["update"], "global_step": last["global_step"], "wall_time": last["wall_time"],
            "sps": last["global_step"] / last["wall_time"] if last["wall_time"] > 0 else 0.0,
            "sps_after_first_update": steady_steps / steady_time if steady_time > 0 else None,
            "time": {k[5:]: v for k, v in last.items() if k.startswith("time_")},
            "starts": starts,  # one per start (a resumed run has several); process 0's alone over several processes
            "final": final,
            "best": None if best is None else {"metric": best_metric, "value": best[best_metric],
                                               "update": best["update"], "global_step": best["global_step"]}}


def metric_lines(path: Path) -> list[tuple[str, dict]]:
    """(line, record) for each readable record of a metrics.jsonl; a line that is not a JSON object (the
    last line of a run killed while writing it, a hand edit) is left out with one warning on stderr
    naming the file and the lines."""
    path = Path(path)
    if not path.is_file():
        return []
    kept, bad = [], []
    for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        if isinstance(record, dict):
            kept.append((line, record))
        else:
            bad.append(number)
    if bad:
        more = f" and {len(bad) - 5:,} more" if len(bad) > 5 else ""
        are = "is not a JSON record" if len(bad) == 1 else "are not JSON records"
        print(f"warning: {path}: {plural(len(bad), 'line')} {', '.join(map(str, bad[:5]))}{more} {are} (a run "
              "killed while writing?); left out", file=sys.stderr)
    return kept


def read_metrics(run_dir: Path) -> list[dict]:
    """The records of RUN_DIR/metrics.jsonl, unreadable lines left out (see metric_lines)."""
    return [record for _, record in metric_lines(Path(run_dir) / "metrics.jsonl")]


def write_summary(run_dir: Path, best_metric: str = "episode_return", **status) -> dict:
    """Writes summary.json from the whole metrics.jsonl (a resumed run included) and ``status``
    (stopped, error, checkpoint, ...); returns it."""
    run_dir = Path(run_dir)
    summary = {**summarize(read_metrics(run_dir), best_metric),
               **{k: (str(v) if isinstance(v, Path) else v) for k, v in status.items()}}
    (run_dir / "summary.json").write_text(json.dumps(json_safe(summary), indent=2) + "\n")
    return summary


def run_env_name(run_dir: Path) -> str | None:
    """The env of the run in ``run_dir``, from its config.toml (None when there is none or it is not a
    valid config file)."""
    try:
        name = tomllib.loads((Path(run_dir) / "config.toml").read_text()).get("env_name")
    except (OSError, ValueError):
        return None
    return name if isinstance(name, str) else None


def _read_json(path: Path) -> dict:
    """The JSON object in ``path``; {} when it is missing, unreadable or not an object."""
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def earlier_run(run_dir: Path) -> str | None:
    """What of a run ``run_dir`` holds already ("checkpoints up to update N", or "metrics.jsonl" when it
    is not empty), or None: a new run there would mix its records into that run's (and its checkpoint
    pruning delete that run's checkpoints)."""
    from jaxlab.checkpoint import step_dirs

    run_dir = Path(run_dir)
    held = step_dirs(run_dir / "checkpoints")
    if held:
        return f"checkpoints up to update {held[0].name}"
    metrics = run_dir / "metrics.jsonl"
    return "metrics.jsonl" if metrics.is_file() and metrics.stat().st_size > 0 else None


#: CleanRL's TensorBoard names (after their charts/ or losses/ prefix) for metrics.jsonl's keys, where they differ.
CLEANRL_METRICS = {"clipfrac": "clip_fraction", "episodic_return": "episode_return",
                   "episodic_length": "episode_length"}


def metric_meant(name: str, known) -> str | None:
    """The metric of ``known`` (metrics.jsonl keys) that ``name`` means when it is none of them: CleanRL's name
    (charts/SPS, losses/clipfrac, charts/episodic_return) or a close spelling in any case; None for none."""
    import difflib

    known = list(known)
    bare = name.rpartition("/")[2].lower()
    meant = CLEANRL_METRICS.get(bare, bare)
    if meant in known:
        return meant
    by_lower = {k.lower(): k for k in known}
    close = difflib.get_close_matches(meant, list(by_lower), n=1)
    return by_lower[close[0]] if close else None


def folder_name(env_name: str) -> str:
    """``env_name`` as the start of a default folder name (runs/NAME-TIMESTAMP, a sweep's study): each
    character other than letters, digits, '.', '_' and '-' becomes '_'. A Python env's name holds ':'
    and may hold '/' (gymnasium:ALE/Pong-v5, pettingzoo:butterfly/pistonball-v6), which made the run dir
    nested (runs/gymnasium:ALE/Pong-v5-...), out of reach of --resume latest and `jaxlab runs`."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", env_name)


#: The names a run writes in its run dir (`jaxlab sweep`'s train-output.log, wandb's folder, the write probe of
#: `jaxlab train` and the temporary file of a resume's metrics cut included): anything else is not a run's.
RUN_DIR_ENTRIES = ("config.toml", "metrics.jsonl", "metrics.jsonl.tmp", "summary.json", "run.json", "notes.md",
                   "run.log", ".lock", ".write-test-*", "checkpoints", "checkpoints-replaced", "train-output.log",
                   "wandb")


def other_entries(run_dir: Path) -> list[str]:
    """The names in ``run_dir`` that no run writes there (see RUN_DIR_ENTRIES), sorted; [] when it is no
    folder (or cannot be read: the write check names why)."""
    try:
        names = [p.name for p in Path(run_dir).iterdir()]
    except OSError:
        return []
    return sorted(n for n in names if not any(fnmatch.fnmatchcase(n, entry) for entry in RUN_DIR_ENTRIES))


def is_run(path: Path) -> bool:
    """Whether ``path`` is a run dir: it holds metrics.jsonl or config.toml."""
    return (path / "metrics.jsonl").is_file() or (path / "config.toml").is_file()


def _folders(path: Path) -> list[Path]:
    try:
        return sorted(p for p in path.iterdir() if p.is_dir())
    except OSError:
        return []


def nested_run_folders(root: Path) -> list[tuple[Path, int]]:
    """(folder, run dirs in it) for the folders one or two levels below ``root`` (not run dirs
    themselves) that hold run dirs, such as a sweep's runs/sweeps/STUDY: `jaxlab runs` lists one folder."""
    found = []
    for child in (c for c in _folders(Path(root)) if not is_run(c)):
        for folder in [child, *(g for g in _folders(child) if not is_run(g))]:
            runs = sum(is_run(p) for p in _folders(folder))
            if runs:
                found.append((folder, runs))
    return found


def unfinished_status(run: Path, info: dict) -> str:
    """The status of a run dir without summary.json (``info``: its run.json): "running" while a process
    holds its lock; "killed" when the process its .lock names, on this host, is gone without releasing it
    (kill -9, out of memory); else "running or killed" (another host's run; no .lock: a Trainer of a jaxlab
    that took no lock)."""
    from jaxlab.run import lock

    if lock.held(run):
        return "running"
    pid = lock.owner_pid(run)
    if pid is not None and info.get("host") == socket.gethostname() and not lock.process_alive(pid):
        return "killed"
    return "running or killed"


def run_rows(root: Path) -> list[dict]:
    """One row per run dir under ``root`` (a dir holding config.toml or metrics.jsonl), oldest first."""
    root = Path(root)
    if is_run(root):
        dirs = [root]
    elif root.is_dir():
        dirs = sorted((p for p in root.iterdir() if p.is_dir() and is_run(p)), key=lambda p: p.stat().st_mtime)
    else:
        dirs = []
    rows = []
    for run in dirs:
        info, summary = _read_json(run / "run.json"), _read_json(run / "summary.json")
        if not summary:
            damaged = (run / "summary.json").is_file()  # there, but not a JSON object (cut short, edited)
            summary = summarize(read_metrics(run))
            summary["status"] = "summary.json unreadable" if damaged else unfinished_status(run, info)
        env = info.get("env_name") or run_env_name(run)
        notes_file = run / "notes.md"
        notes = notes_file.read_text(errors="replace").strip().splitlines() if notes_file.is_file() else []
        notes = notes[0] if notes else ""
        final = summary.get("final")
        final = final.get("episode_return") if isinstance(final, dict) else None
        best = summary.get("best")
        best = best if isinstance(best, dict) else {}
        if best.get("metric", "episode_return") != "episode_return":  # another checkpoint.best_metric's best
            best = summarize(read_metrics(run))["best"] or {}
        status = summary.get("status") or (f"stopped at once ({summary['stopped']})" if interrupted_at_once(summary)
                                          else "error" if summary.get("error") else
                                          f"stopped ({summary['stopped']})" if summary.get("stopped") else "done")
        named = info.get("run_name")
        label = run.name if not named or named == run.name else f"{run.name} ({named})"
        rows.append({"run": label, "path": str(run), "env": str(env or "?"),  # a field of the wrong type: as missing
                     "steps": _number(summary.get("global_step")) or 0, "sps": _number(summary.get("sps")) or 0.0,
                     "final_return": _number(final), "best_return": _number(best.get("value")), "status": str(status),
                     "notes": notes})
    return rows


def format_runs(rows: list[dict]) -> str:
    """The runs as an aligned text table."""
    if not rows:
        return "no runs found"
    number = lambda v, f: "-" if v is None else format(v, f)  # noqa: E731
    table = [("run", "env", "steps", "SPS", "final return", "best return", "status", "notes")]
    for r in rows:
        table.append((r["run"], r["env"], f"{r['steps']:,}", f"{r['sps']:,.0f}", number(r["final_return"], ".2f"),
                      number(r["best_return"], ".2f"), r["status"], r["notes"][:60]))
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    right = {2, 3, 4, 5}
    return "\n".join("  ".join(cell.rjust(w) if i in right else cell.ljust(w) for i, (cell, w) in
                               enumerate(zip(row, widths, strict=True))).rstrip() for row in table)

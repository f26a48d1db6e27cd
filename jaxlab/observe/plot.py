"""Learning curves of several runs into one PNG (`jaxlab plot`). Needs matplotlib, an optional extra:
pip install -e ".[plot]" in the jaxlab checkout."""

from __future__ import annotations

from pathlib import Path

from jaxlab.observe.records import is_update_record, metric_meant, read_metrics
from jaxlab.messages import install_extra

X_AXES = {"step": ("global_step", "agent-steps"), "time": ("wall_time", "wall time (s)")}


class PlotError(ValueError):
    """Bad plot input (a run dir without metrics, a metric no run has, matplotlib missing)."""


def update_records(run: Path) -> list[dict]:
    """The update records (is_update_record) of RUN/metrics.jsonl; PlotError when it has none: no file,
    no readable record, or only records without jaxlab's numeric update, global_step and wall_time (the
    metrics.jsonl of another program), which are left out of a file that has update records too."""
    records = read_metrics(run)
    if not records:
        raise PlotError(f"{run} has no metrics.jsonl records; pass run dirs written by `jaxlab train`")
    updates = [r for r in records if is_update_record(r)]
    if not updates:
        raise PlotError(f"{Path(run) / 'metrics.jsonl'} holds no jaxlab update records (none of its {len(records)} "
                        "records has a numeric update, global_step and wall_time: another program's file?); pass "
                        "run dirs written by `jaxlab train`")
    return updates


def run_labels(run_dirs: list[Path]) -> list[str]:
    """A legend label per run: its folder's name, with as many parent folders as it takes to tell runs of
    the same name apart (two studies' trial-0-seed-0: study-a/trial-0-seed-0, study-b/trial-0-seed-0)."""
    parts = [Path(run).resolve().parts for run in run_dirs]
    depths = [1] * len(parts)
    while True:
        labels = ["/".join(p[-d:]) for p, d in zip(parts, depths)]
        clashing = {i for i, label in enumerate(labels)  # the same run given twice keeps its one name
                    if any(other == label and parts[j] != parts[i] for j, other in enumerate(labels))}
        if not clashing:
            return labels
        for i in clashing:
            depths[i] += 1


def distinct_runs(run_dirs: list[Path], warn=None) -> list[Path]:
    """``run_dirs`` without repeats of a run (one folder, however it is written: runs/a, ./runs/a/, a link to
    it), each kept where it first comes; ``warn`` (if given) is called with a line per repeat."""
    first: dict[Path, Path] = {}
    for run in run_dirs:
        where = Path(run).resolve()
        if where not in first:
            first[where] = run
        elif warn is not None:
            written = "" if str(run) == str(first[where]) else f" (as {run})"
            warn(f"{first[where]} is given twice{written}: it has one line in the plot")
    return list(first.values())


def curves(run_dirs: list[Path], metric: str, x: str) -> list[tuple[str, list[float], list[float]]]:
    """(label, xs, ys) per run: the updates where ``metric`` has a value."""
    key = X_AXES[x][0]
    out = []
    for run, label in zip(run_dirs, run_labels(run_dirs)):
        records = update_records(Path(run))
        points = [(r[key], r[metric]) for r in records if r.get(metric) is not None]
        text = next((y for _, y in points if isinstance(y, bool) or not isinstance(y, (int, float))), None)
        if text is not None:  # compile_cache's "hit", a hand-edited value: no curve to draw
            raise PlotError(f"{metric!r} is not a number in {run} (e.g. {text!r}); plot a numeric metric, e.g. "
                            f"--metric episode_return")
        out.append((label, [p[0] for p in points], [p[1] for p in points]))
    if not any(xs for _, xs, _ in out):
        raise PlotError(no_values_message(run_dirs, metric))
    return out


def no_values_message(run_dirs: list[Path], metric: str) -> str:
    """Why no run has a value of ``metric``: the runs that log it as null in every update (an episode
    statistic of updates that ended no episode), or else the numeric metrics of every update of every run
    (not of the first run's last update alone, whose episode statistics may be null)."""
    records = {run: update_records(Path(run)) for run in run_dirs}
    logged = [str(run) for run, held in records.items() if any(metric in r for r in held)]
    if logged:
        return (f"no run has values of {metric!r}: {', '.join(logged)} log{'s' if len(logged) == 1 else ''} it as "
                "null in every update (an episode statistic is null in updates that ended no episode); train "
                "longer, or plot another metric")
    known = sorted({k for held in records.values() for r in held for k, v in r.items()
                    if isinstance(v, (int, float)) and not isinstance(v, bool)})
    meant = metric_meant(metric, known)
    hint = f"did you mean {meant!r}? " if meant else ""
    return f"no run has values of {metric!r}; {hint}the runs' metrics: {', '.join(known)}"


def plot(run_dirs: list[Path], output: Path, metric: str = "episode_return", x: str = "step",
         warn=None) -> Path:
    """Draws ``metric`` of every run against steps or wall time into the PNG ``output``. A run with no
    value of ``metric`` gets no line, and ``warn`` (if given) is called with one line naming it; a run given
    twice is drawn once, with a line to ``warn`` (distinct_runs)."""
    lines = curves(distinct_runs(run_dirs, warn), metric, x)
    if warn is not None:
        for label, xs, _ in lines:
            if not xs:
                warn(f"{label} has no values of {metric!r}: it has no line in the plot")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise PlotError(f"jaxlab plot needs matplotlib: {install_extra('plot')}") from None
    figure, axes = plt.subplots(figsize=(8, 5), dpi=100)
    for label, xs, ys in lines:
        axes.plot(xs, ys, label=label, linewidth=1.5)
    axes.set_xlabel(X_AXES[x][1])
    axes.set_ylabel(metric)
    axes.grid(alpha=0.3)
    axes.legend(loc="best", fontsize="small")
    figure.tight_layout()
    output = Path(output)
    figure.savefig(output, format="png")
    plt.close(figure)
    return output

"""A study's results: the table of best trials (or the Pareto front of score and cost) with their run
dirs, the best config written as a file that `jaxlab train --config` accepts, and PNG plots
(optimisation history, parameter importances, Pareto front)."""

from __future__ import annotations

import os
import warnings
from pathlib import Path

from jaxlab.config import config_from_toml, to_toml
from jaxlab.messages import counted
from jaxlab.sweep.space import SweepSpec, apply_params

SHOWN = 10


def _states(study) -> dict[str, int]:
    counts: dict[str, int] = {}
    for t in study.get_trials(deepcopy=False):
        counts[t.state.name.lower()] = counts.get(t.state.name.lower(), 0) + 1
    return counts


def ranked(study, spec: SweepSpec) -> list:
    """Complete trials, best first (single objective), or the Pareto front by score (score,cost)."""
    import optuna

    if spec.multi_objective:
        front = study.best_trials
        return sorted(front, key=lambda t: t.values[0], reverse=spec.direction == "maximize")
    done = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    return sorted(done, key=lambda t: t.value, reverse=spec.direction == "maximize")


def best_config_text(trial, spec: SweepSpec, base_toml: str, study_name: str) -> str:
    """The full config of ``trial``'s first seed (the study's base config, the trial's values and seed),
    as TOML for --config, with a comment saying where it comes from."""
    base = config_from_toml(base_toml)
    seed = trial.user_attrs.get("seeds", [base.train.seed])[0]
    config = apply_params(base, dict(trial.params), seed=seed)
    score = trial.values[0]
    header = (f"# trial {trial.number} of sweep {study_name}: {spec.metric} {score:.6g} (mean over the last "
              f"{spec.average_last:.0%} of the run's steps, over "
              f"{counted(len(trial.user_attrs.get('seeds', [seed])), 'seed')}); train.seed is its first seed\n")
    return header + to_toml(config)


def reproduce_command(trial, env_name: str, path: Path) -> str:
    """The command that trains ``trial``'s config again; pinned to as many cores as the trial saw,
    because on a CPU XLA's results depend on how many cores it sees."""
    cores = trial.user_attrs.get("cpu_cores")
    here = sorted(os.sched_getaffinity(0))
    pin = f"taskset -c {','.join(map(str, here[:cores]))} " if cores and cores < len(here) else ""
    return f"{pin}jaxlab train {env_name} --config {path}"


def show(study, spec: SweepSpec, base_toml: str, study_dir: Path, env_name: str, again: str) -> str:
    """The results table; writes STUDY_DIR/best.toml (and pareto-trial-N.toml for each Pareto trial of
    a score,cost study). Returns the text to print. ``again``: the command that continues the study."""
    counts = _states(study)
    total = sum(counts.values())
    states = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    lines = [f"study {study.study_name}: {total} trials" + (f" ({states})" if states else "")
             + f"; {spec.metric} = mean over the last {spec.average_last:.0%} of each run, over "
             f"{counted(spec.seeds, 'seed')}"]
    best = ranked(study, spec)
    if not best:
        lines.append(f"no complete trial yet; run `{again}`")
        return "\n".join(lines)
    what = "Pareto front (score up, wall time down)" if spec.multi_objective else f"best {min(SHOWN, len(best))}"
    lines.append(what + ":")
    names = [p.name for p in spec.params]
    header = ["trial", spec.metric, "cost s" if spec.multi_objective else "wall s", *names, "run dir"]
    rows = [header]
    for t in best[:SHOWN if not spec.multi_objective else None]:
        wall = t.values[1] if spec.multi_objective else sum(t.user_attrs.get("wall_times", [0])) / max(
            len(t.user_attrs.get("wall_times", [0])), 1)
        dirs = t.user_attrs.get("run_dirs", ["?"])
        rows.append([str(t.number), f"{t.values[0]:.4g}", f"{wall:.1f}",
                     *[_cell(t.params.get(n)) for n in names],
                     os.path.relpath(dirs[0]) + (f" (+{len(dirs) - 1})" if len(dirs) > 1 else "")])
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines += ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    path = study_dir / "best.toml"
    path.write_text(best_config_text(best[0], spec, base_toml, study.study_name))
    lines.append(f"best config (trial {best[0].number}) written to {path}; train it again with:")
    lines.append(f"  {reproduce_command(best[0], env_name, path)}")
    if spec.multi_objective:
        for stale in study_dir.glob("pareto-trial-*.toml"):  # an earlier --show's, of trials since left off the front
            stale.unlink()
        for t in best:
            (study_dir / f"pareto-trial-{t.number}.toml").write_text(
                best_config_text(t, spec, base_toml, study.study_name))
        lines.append(f"each Pareto trial's config: {study_dir}/pareto-trial-N.toml")
    return "\n".join(lines)


def _cell(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "-" if value is None else str(value)


def plot(study, spec: SweepSpec, study_dir: Path, again: str) -> list[str]:
    """Writes history.png, importances.png and (score,cost) pareto.png into ``study_dir``; returns one
    line per plot: where it went, or why it was skipped. A study with no complete trial gets no
    picture (Optuna would draw empty ones), one line instead; ``again``: the command that continues it."""
    if not ranked(study, spec):
        return [f"no complete trial yet to plot (nothing written); run `{again}`"]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import optuna.visualization.matplotlib as vis

    target = (lambda t: t.values[0]) if spec.multi_objective else None
    name = spec.metric

    def importances():
        with warnings.catch_warnings():  # that it ranks low target values: importance_target's are so
            warnings.filterwarnings("ignore", message="PedAnovaImportanceEvaluator computes the importances")
            return vis.plot_param_importances(study, target=importance_target(spec), target_name=name)

    jobs = [("history.png", lambda: vis.plot_optimization_history(study, target=target, target_name=name)),
            ("importances.png", importances)]
    if spec.multi_objective:
        jobs.append(("pareto.png", lambda: vis.plot_pareto_front(study, target_names=[name, "wall time (s)"])))
    lines = []
    for filename, draw in jobs:
        try:
            with warnings.catch_warnings(record=True) as caught:  # Optuna's, e.g. too few trials for importances
                axes = draw()
        except (ValueError, RuntimeError, ZeroDivisionError) as err:
            lines.append(f"{filename}: skipped ({str(err).splitlines()[0]}){removed_stale(study_dir / filename)}")
            continue
        figure = axes.figure if hasattr(axes, "figure") else axes.flat[0].figure
        figure.set_size_inches(8, 5)
        figure.tight_layout()
        figure.savefig(study_dir / filename, dpi=100)
        plt.close(figure)
        notes = list(dict.fromkeys(str(w.message).splitlines()[0] for w in caught if _is_optunas(w)))
        for other in (w for w in caught if not _is_optunas(w)):  # as they would have been shown
            warnings.warn_explicit(other.message, other.category, other.filename, other.lineno)
        lines.append(f"wrote {study_dir / filename}" + "".join(f" (Optuna: {note})" for note in notes))
    return lines


def removed_stale(picture: Path) -> str:
    """Removes ``picture``, a plot of an earlier --plot that this one skipped drawing (it showed the study as it
    was then, and was left looking current); the words that say so, or "" when there was none."""
    if not picture.is_file():
        return ""
    try:
        picture.unlink()
    except OSError as err:
        return f"; {picture} is an earlier --plot's, stale (it could not be removed: {err.strerror or err})"
    return f"; removed {picture}, an earlier --plot's, which showed the study as it was then"


def importance_target(spec: SweepSpec):
    """The value whose importances importances.png draws: None (the study's own objective and direction)
    for one objective; for score,cost the score, negated when maximised, because Optuna's PED-ANOVA ranks a
    given target's low values best (the score as it is drew what makes a trial's return low)."""
    if not spec.multi_objective:
        return None
    sign = -1.0 if spec.direction == "maximize" else 1.0
    return lambda trial: sign * trial.values[0]


def _is_optunas(caught) -> bool:
    """Whether a warning ``caught`` while drawing is Optuna's word on the picture (its own warnings), not a
    library's deprecation notice."""
    return issubclass(caught.category, UserWarning) and "optuna" in caught.filename

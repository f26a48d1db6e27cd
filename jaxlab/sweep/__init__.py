"""Hyperparameter sweeps on Optuna (`jaxlab sweep`): ``space`` the search-space file and its checks,
``study`` storage, sampler, pruner and the objective, ``trials`` the trial processes and their share
of the machine, ``supervisor`` the loop that runs, prunes and stops them, ``results`` the table, the
best config and the plots, ``child`` the launcher that ties a trial's life to its sweep. Optuna is
imported only when a sweep runs (pip install -e ".[sweep]" in the jaxlab checkout)."""

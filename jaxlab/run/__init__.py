"""A whole run: the training loop with its hooks (loop.py), resume (resume.py), stop signals
(signals.py) and benchmarks (bench.py). ``train_run`` and ``RunResult`` import JAX on first use."""

import importlib

__all__ = ["RunResult", "train_run"]


def __getattr__(name):
    if name not in __all__:
        raise AttributeError(f"module 'jaxlab.run' has no attribute {name!r}")
    return getattr(importlib.import_module("jaxlab.run.loop"), name)

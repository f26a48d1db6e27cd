"""jaxlab: a JAX LSTM-PPO trainer over batched C environments.

Nothing is imported until it is used (the `jaxlab` command's entry, `jaxlab.launch`, relies on it):
``jaxlab.make`` and ``jaxlab.VecEnv`` import numpy; ``jaxlab.Trainer``, ``jaxlab.load_config`` and ``jaxlab.ppo`` import
JAX on first use.
"""

import importlib

__version__ = "0.1.0"
__all__ = ["Trainer", "VecEnv", "load_config", "make", "ppo", "__version__"]

_LAZY = {"VecEnv": ("jaxlab.env", "VecEnv"), "make": ("jaxlab.env", "make"),
         "Trainer": ("jaxlab.train.trainer", "Trainer"), "load_config": ("jaxlab.config", "load_config"),
         "ppo": ("jaxlab.agent.ppo", None)}


def __getattr__(name):
    if name not in _LAZY:
        try:  # a submodule not yet imported (`import jaxlab; jaxlab.env`)
            return importlib.import_module(f"jaxlab.{name}")
        except ModuleNotFoundError as err:
            if err.name != f"jaxlab.{name}":
                raise
        raise AttributeError(f"module 'jaxlab' has no attribute {name!r}")
    module_name, attribute = _LAZY[name]
    module = importlib.import_module(module_name)
    return module if attribute is None else getattr(module, attribute)

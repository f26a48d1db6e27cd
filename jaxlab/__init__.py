"""jaxlab: a JAX LSTM-PPO trainer over batched C environments.

``jaxlab.make`` needs only numpy; ``jaxlab.Trainer``, ``jaxlab.load_config`` and ``jaxlab.ppo`` import
JAX on first use.
"""

import importlib

from jaxlab.env import VecEnv, make

__version__ = "0.1.0"
__all__ = ["Trainer", "VecEnv", "load_config", "make", "ppo", "__version__"]

_LAZY = {"Trainer": ("jaxlab.train.trainer", "Trainer"), "load_config": ("jaxlab.config", "load_config"),
         "ppo": ("jaxlab.agent.ppo", None)}


def __getattr__(name):
    if name not in _LAZY:
        raise AttributeError(f"module 'jaxlab' has no attribute {name!r}")
    module_name, attribute = _LAZY[name]
    module = importlib.import_module(module_name)
    return module if attribute is None else getattr(module, attribute)

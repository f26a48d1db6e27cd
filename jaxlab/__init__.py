"""jaxlab: a JAX LSTM-PPO trainer over batched C environments."""

from jaxlab.env import VecEnv, make

__version__ = "0.1.0"
__all__ = ["VecEnv", "make", "__version__"]

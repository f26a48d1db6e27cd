"""The agent as pure JAX (no I/O): policy networks (policy.py), action distributions (distributions.py),
PPO math (ppo.py)."""

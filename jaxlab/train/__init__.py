"""Training on one machine: the rollout's per-step protocol (rollout.py), the jitted update (learner.py),
the Trainer that wires them (trainer.py), and evaluation of a policy (evaluation.py)."""

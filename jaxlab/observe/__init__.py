"""Seeing a run: the terminal dashboard (dashboard.py), warnings (alerts.py), run records (records.py),
curves (plot.py), wandb (wandb_logger.py) and the run's log file for library logs (logfile.py)."""

"""Evaluation: sampling metrics (pass@k, mean@k, maj@k, verl's bootstrapped best@k)."""

from replication.evaluate.metrics import best_at_k_bootstrap, maj_at_k, mean_at_k, pass_at_k

__all__ = ["best_at_k_bootstrap", "maj_at_k", "mean_at_k", "pass_at_k"]

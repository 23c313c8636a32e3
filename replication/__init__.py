"""Replication of three 2026 papers on adaptive rollout allocation in RLVR.

- VIP (arXiv 2602.01601): GP-predicted success probability + convex variance-minimising allocation.
- DynaMO (arXiv 2602.19208): Bernoulli-variance allocation + entropy-aware advantage modulation.
- Multi-adversary GDRO (arXiv 2601.19280): Prompt-GDRO reweighting and Rollout-GDRO allocation.

``replication.allocation`` is importable on its own (numpy/scipy; gpytorch only for the GP).
"""

__version__ = "0.1.0"

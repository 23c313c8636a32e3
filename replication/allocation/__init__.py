"""Rollout allocation: who gets how many rollouts (VIP, DynaMO-DRA, Rollout-GDRO, baselines),
and per-prompt gradient weights (Prompt-GDRO).

Importable without the training stack: numpy + scipy (gpytorch only for the VIP GP).
Every allocator is registered by name: ``make_allocator("vip", lower=4, upper=32, pool=...)``.
"""

from replication.allocation.base import (
    ALLOCATORS,
    Allocator,
    PromptPool,
    available_allocators,
    make_allocator,
    register_allocator,
)

# --- maths: variance objectives and exact solvers
# --- baseline allocators
# --- VIP: GP predictor, embeddings, allocators, ablations
# --- DynaMO: dynamic rollout allocation
# --- GDRO: difficulty classifier, EXP3P, Rollout-GDRO, square-root law, Prompt-GDRO

__all__ = [
    "ALLOCATORS",
    "Allocator",
    "PromptPool",
    "available_allocators",
    "make_allocator",
    "register_allocator",
]

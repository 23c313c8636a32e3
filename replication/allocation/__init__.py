"""Rollout allocation: who gets how many rollouts (VIP, DynaMO-DRA, Rollout-GDRO, baselines),
and per-prompt gradient weights (Prompt-GDRO).

Importable without the training stack: numpy + scipy (gpytorch only for the VIP GP).
Every allocator is registered by name: ``make_allocator("vip", lower=4, upper=32, pool=...)``.
"""

from typing import Any as _Any

from replication.allocation.base import ALLOCATORS, PROMPT_WEIGHTS, Allocator, PromptPool, register_allocator

# --- maths: variance objectives and exact solvers
from replication.allocation.solvers import (
    allocation_objective,
    even_split,
    solve_continuous,
    solve_integer,
)
from replication.allocation.variance import (
    VARIANCE_ESTIMATORS,
    VarianceEstimator,
    available_variance_estimators,
    bernoulli_variance,
    drgrpo_factor,
    get_variance_estimator,
    grpo_factor,
    register_variance_estimator,
    rloo_factor,
    success_variance,
)
from replication.allocation.water_level import (
    round_to_budget,
    sqrt_law_allocation,
    water_level_allocation,
    water_level_continuous,
)
# --- baseline allocators
from replication.allocation.baselines import Uniform
# --- VIP: GP predictor, embeddings, allocators, ablations
# (gp.py imports torch/gpytorch; it is loaded only when a GP predictor is built)
from replication.allocation.embeddings import EMBEDDERS, available_embedders, make_embedder, register_embedder
from replication.allocation.predictors import (
    PREDICTORS,
    SuccessPredictor,
    available_predictors,
    make_predictor,
    register_predictor,
)
from replication.allocation.vip import (
    VIP,
    Oracle,
    VIPConfig,
    VIPInverseAccuracy,
    VIPInverseVariance,
    VIPRidge,
    allocate_separable,
    official_code_options as vip_official_code_options,
)
from replication.allocation.vip_probe import VIPProbe, VIPProbeConfig
# --- DynaMO: dynamic rollout allocation
from replication.allocation.dynamo import OFFICIAL_CODE_OPTIONS as DYNAMO_OFFICIAL_CODE_OPTIONS
from replication.allocation.dynamo import DynamoDRA, floor_proportional_allocation
# --- GDRO: difficulty classifier, EXP3P, Rollout-GDRO, square-root law, Prompt-GDRO
from replication.allocation.difficulty import DifficultyClassifier, DifficultyConfig, any_correct
from replication.allocation.exp3p import EXP3P, EXP3PConfig
from replication.allocation.gdro_sqrt_law import GDROSqrtLaw
from replication.allocation.prompt_gdro import PromptGDRO, PromptGDROConfig, soft_worst_group
from replication.allocation.rollout_gdro import RolloutGDRO, max_joint_probability_config


def make_allocator(name: str, **kwargs: _Any) -> Allocator:
    """Build a registered allocator; unknown names and unknown options raise ValueError."""
    return ALLOCATORS.get(name)(**kwargs)


def available_allocators() -> list[str]:
    return ALLOCATORS.names()

__all__ = [
    "ALLOCATORS",
    "PROMPT_WEIGHTS",
    "Allocator",
    "PromptPool",
    "available_allocators",
    "make_allocator",
    "register_allocator",
    # maths: variance objectives and exact solvers
    "VARIANCE_ESTIMATORS",
    "VarianceEstimator",
    "allocation_objective",
    "available_variance_estimators",
    "bernoulli_variance",
    "drgrpo_factor",
    "even_split",
    "get_variance_estimator",
    "grpo_factor",
    "register_variance_estimator",
    "rloo_factor",
    "round_to_budget",
    "solve_continuous",
    "solve_integer",
    "sqrt_law_allocation",
    "success_variance",
    "water_level_allocation",
    "water_level_continuous",
    # baselines
    "Uniform",
    # VIP
    "EMBEDDERS",
    "PREDICTORS",
    "Oracle",
    "SuccessPredictor",
    "VIP",
    "VIPConfig",
    "VIPInverseAccuracy",
    "VIPInverseVariance",
    "VIPProbe",
    "VIPProbeConfig",
    "VIPRidge",
    "allocate_separable",
    "available_embedders",
    "available_predictors",
    "make_embedder",
    "make_predictor",
    "register_embedder",
    "register_predictor",
    "vip_official_code_options",
    # DynaMO
    "DYNAMO_OFFICIAL_CODE_OPTIONS",
    "DynamoDRA",
    "floor_proportional_allocation",
    # GDRO
    "DifficultyClassifier",
    "DifficultyConfig",
    "any_correct",
    "EXP3P",
    "EXP3PConfig",
    "GDROSqrtLaw",
    "PromptGDRO",
    "PromptGDROConfig",
    "soft_worst_group",
    "RolloutGDRO",
    "max_joint_probability_config",
]

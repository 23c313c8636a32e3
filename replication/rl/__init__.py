"""RL maths: group advantages (variable group sizes), PPO-clip loss and aggregation, KL
estimators, DynaMO token modulation, per-token log-probs/entropies of a causal LM.

Estimators are registered by name (``@register_advantage("rloo")``), so a config says
``advantage: rloo``. ``rl/advantages.py`` itself needs only numpy (numpy in, numpy out;
torch in, torch out); the other modules are torch.
"""

from replication.rl.advantages import ADVANTAGE_ESTIMATORS, group_advantages, register_advantage
from replication.rl.kl import KL_ESTIMATORS, kl_k1, kl_k2, kl_k3, kl_penalty, register_kl
from replication.rl.logprobs import token_logprobs_and_entropy
from replication.rl.modulation import (
    DynaMOConfig,
    gradient_compensation,
    modulate_advantages,
    stabilisation_factor,
    update_stabilisation,
)
from replication.rl.ppo import (
    AGGREGATIONS,
    PPOConfig,
    PPOLoss,
    aggregate,
    policy_ratio,
    ppo_clip_active,
    ppo_clip_loss,
)

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "AGGREGATIONS",
    "DynaMOConfig",
    "KL_ESTIMATORS",
    "PPOConfig",
    "PPOLoss",
    "aggregate",
    "gradient_compensation",
    "group_advantages",
    "kl_k1",
    "kl_k2",
    "kl_k3",
    "kl_penalty",
    "modulate_advantages",
    "policy_ratio",
    "ppo_clip_active",
    "ppo_clip_loss",
    "register_advantage",
    "register_kl",
    "stabilisation_factor",
    "token_logprobs_and_entropy",
    "update_stabilisation",
]

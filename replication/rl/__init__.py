"""RL maths: group advantages (variable group sizes), PPO-clip loss and aggregation, KL
estimators, DynaMO token modulation, per-token log-probs/entropies of a causal LM.

Estimators are registered by name (``@register_advantage("rloo")``), so a config says
``rl.estimator: rloo``. ``rl/advantages.py`` needs only numpy (numpy in, numpy out; torch in,
torch out) and is importable on a core install; the other modules are torch and load on first
use of one of their names (``from replication.rl import PPOConfig`` imports torch).
"""

from importlib import import_module
from typing import Any

from replication.rl.advantages import ADVANTAGE_ESTIMATORS, group_advantages, register_advantage

_LAZY = {
    "KL_ESTIMATORS": "kl", "kl_k1": "kl", "kl_k2": "kl", "kl_k3": "kl", "kl_penalty": "kl",
    "register_kl": "kl",
    "token_logprobs_and_entropy": "logprobs",
    "MODULATIONS": "modulation", "DynaMOConfig": "modulation", "gradient_compensation": "modulation",
    "modulate_advantages": "modulation", "stabilisation_factor": "modulation",
    "update_stabilisation": "modulation",
    "AGGREGATIONS": "ppo", "PPOConfig": "ppo", "PPOLoss": "ppo", "aggregate": "ppo",
    "policy_ratio": "ppo", "ppo_clip_active": "ppo", "ppo_clip_loss": "ppo",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(f"replication.rl.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'replication.rl' has no attribute {name!r}")


__all__ = ["ADVANTAGE_ESTIMATORS", "group_advantages", "register_advantage", *_LAZY]

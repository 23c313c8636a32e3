"""Rollout engines behind one interface (``base.RolloutEngine``): HF on CPU/GPU; vLLM on GPU.

Importing this package does not import transformers; ``HFRolloutEngine`` loads on first use.
"""

from replication.rollout.base import RolloutBatch, RolloutEngine, SamplingConfig, validate_counts

__all__ = ["HFRolloutEngine", "RolloutBatch", "RolloutEngine", "SamplingConfig", "validate_counts"]


def __getattr__(name: str):
    if name == "HFRolloutEngine":
        from replication.rollout.hf_engine import HFRolloutEngine

        return HFRolloutEngine
    raise AttributeError(name)

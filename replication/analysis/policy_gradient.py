"""One draw's policy gradient, as the trainer computes it: rollouts → verifier → rewards → group
advantages → ∇θ of the trainer's clipped loss at ratio 1, flattened (docs/gradient_variance.md)."""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from replication.rl import PPOConfig, group_advantages, ppo_clip_loss, token_logprobs_and_entropy
from replication.rollout.base import RolloutBatch, SamplingConfig
from replication.tasks.verify import Verifier


@dataclasses.dataclass
class PromptBatch:
    """The fixed batch: aligned per-prompt fields (a slice of the trainer's PromptSet)."""

    ids: list
    inputs: list[str]
    answers: list[str]
    sources: list[str]


def flat_policy_gradient(
    model: torch.nn.Module,
    batch: RolloutBatch,
    row_advantages: np.ndarray,
    ppo_cfg: PPOConfig,
    temperature: float,
) -> torch.Tensor:
    """∇θ of the trainer's clipped loss on the whole rollout set as ONE mini-batch (token-mean
    over all valid tokens), flattened over the model's parameters in ``parameters()`` order.

    At the sampling policy the ratio is 1, so this is the on-policy policy gradient the first
    PPO step uses. As in train/update.py, rows with a zero advantage are left out of the forward
    pass but their tokens stay in the token-mean denominator (identical gradient). The KL term is
    not included: the measurement passes ``kl_coef=0`` (checkpoint_measurement.py; its gradient
    vanishes at the reference policy, and the GDRO arms' β_KL = 0.001 makes it a small
    regulariser); a config with ``kl_coef > 0`` here needs ``ref_logp``, which is not computed.
    """
    params = [p for p in model.parameters() if p.requires_grad]
    adv = torch.as_tensor(np.asarray(row_advantages, dtype=np.float32))
    if adv.shape != (batch.n_rows,):
        raise ValueError(f"{adv.shape[0] if adv.dim() else 0} advantages for {batch.n_rows} rows")
    mask_all = batch.completion_mask.float()
    if ppo_cfg.aggregation == "token-mean":
        denom = mask_all.sum().clamp_min(1.0)
    else:
        denom = torch.tensor(float(batch.n_rows))
    keep = torch.nonzero(adv != 0).flatten()
    if len(keep) == 0:
        return torch.zeros(sum(p.numel() for p in params))
    was_training = model.training
    model.train()
    try:
        kmask = batch.completion_mask[keep].float()
        logp, _ = token_logprobs_and_entropy(model, batch.input_ids[keep], batch.attention_mask[keep],
                                             temperature, completion_mask=kmask)
        adv_tok = adv[keep].unsqueeze(1) * kmask
        res = ppo_clip_loss(logp, batch.old_logprobs[keep], adv_tok, kmask, ppo_cfg, denominator=denom)
        grads = torch.autograd.grad(res.loss, params, allow_unused=True)
    finally:
        model.train(was_training)
    return torch.cat([(g if g is not None else torch.zeros_like(p)).reshape(-1)
                      for g, p in zip(grads, params)]).detach()


def rollout_gradient(
    model: torch.nn.Module,
    engine,
    prompts: PromptBatch,
    counts: np.ndarray,
    verifier: Verifier,
    estimator: str,
    ppo_cfg: PPOConfig,
    sampling: SamplingConfig,
    generator: torch.Generator,
    reward_positive: float = 1.0,
    reward_negative: float = 0.0,
) -> tuple[torch.Tensor, np.ndarray]:
    """One draw, as the trainer's step does it: rollouts → verifier → rewards → group
    advantages → gradient. Returns (flat gradient, per-row advantages)."""
    batch = engine.generate(prompts.ids, prompts.inputs, prompts.answers, counts, sampling, generator=generator)
    batch.check_alignment()
    correct = verifier.is_correct(batch.completions, batch.row_answers,
                                  [prompts.sources[g] for g in batch.group_index])
    rewards = np.where(correct, reward_positive, reward_negative)
    adv = group_advantages(rewards, batch.group_index, estimator)
    return flat_policy_gradient(model, batch, adv, ppo_cfg, sampling.temperature), adv

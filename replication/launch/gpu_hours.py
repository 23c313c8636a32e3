"""A first-order GPU-hours estimate of one training run, anchored on a figure a paper measured.

    est = gpu_hours(cfg)          # GPU-hours of one run (an estimate, not a budget)

**Anchor.** The VIP paper (arXiv 2602.01601, overhead paragraph; ``docs/papers/vip.md``) reports
≈3695 s of training for Qwen2.5-Math-1.5B with verl + FSDP + vLLM on 8 GPUs, at its setup: about
70 steps of 256 prompts × 8 rollouts, responses up to 10k tokens on a model whose context is 4096
tokens, so at most 4096 tokens per sequence. That is 3695 × 8 / 3600 = 8.2 GPU-hours.

**Formula.** Compute grows with parameters × tokens (generation and the update alike), so

    GPU-hours = 8.2 × (P / 1.54e9) × (C / 2048) × (S / 4096) × (steps / 70)

with P the policy's parameters, C the rollouts per step (``prompts_per_step × mean_rollouts``), S
the tokens per sequence (``min(max_model_len or the model's context, PROMPT_TOKENS +
max_new_tokens)``) and steps the run's. A run's wall-clock is its GPU-hours over its GPUs
(perfect scaling assumed). Held-out evaluation is not counted.

**How far to trust it.** The same paper gives ≈4977 s for the 7B model; the formula says
3695 × 7.62 / 1.54 ≈ 18,300 s for it. Either those two times are not whole runs at the same
setup (``replication/report/paper_data/SOURCES.md`` keeps them as "model-specific seconds") or
time grows far less than linearly with the model on that hardware; the estimate may be several
times high for the 7B/8B models. It is an order of magnitude to size a request, not a budget.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from replication.launch.memory import model_geometry


@dataclasses.dataclass(frozen=True)
class Anchor:
    """A measured training run the estimate scales from."""

    source: str
    """Where the figure comes from."""
    parameters: float
    """Its policy's parameters."""
    rollouts_per_step: int
    """Its rollouts per step."""
    sequence_tokens: int
    """Its tokens per sequence (prompt + response bound)."""
    steps: int
    """Its steps."""
    seconds: float
    """Its wall-clock training time."""
    gpus: int
    """Its GPUs."""

    @property
    def gpu_hours(self) -> float:
        return self.seconds * self.gpus / 3600


VIP_1_5B = Anchor(source="VIP (arXiv 2602.01601): Qwen2.5-Math-1.5B, 70 steps x 256 prompts x 8 rollouts, "
                         "8 GPUs, 3695 s", parameters=1.54e9, rollouts_per_step=256 * 8, sequence_tokens=4096,
                  steps=70, seconds=3695.0, gpus=8)
PROMPT_TOKENS = 512
"""Prompt tokens assumed per sequence when ``rollout.vllm.max_model_len`` does not bound it."""
FORMULA = "GPU-hours = 8.2 x (P/1.54e9) x (C/2048) x (S/4096) x (steps/70)"


def sequence_tokens(cfg: Any) -> int:
    """Tokens per sequence: ``PROMPT_TOKENS`` + ``max_new_tokens``, at most ``max_model_len`` (vLLM)
    or the model's context."""
    geo = model_geometry(cfg.model.path)
    cap = geo.context if geo is not None else None
    vllm = getattr(cfg.rollout, "vllm", None)
    if getattr(cfg.rollout, "engine", "hf") == "vllm" and getattr(vllm, "max_model_len", None):
        cap = int(vllm.max_model_len)
    n = PROMPT_TOKENS + int(cfg.rollout.sampling.max_new_tokens)
    return min(n, cap) if cap else n


def gpu_hours(cfg: Any, steps: int | None = None, anchor: Anchor = VIP_1_5B) -> float | None:
    """GPU-hours of one run of ``cfg`` (``steps`` None: the profile's), scaled from ``anchor``; None
    when the model's size is unknown."""
    geo = model_geometry(cfg.model.path)
    if geo is None:
        return None
    n_steps = steps if steps is not None else cfg.steps
    return (anchor.gpu_hours * geo.parameters / anchor.parameters * cfg.budget / anchor.rollouts_per_step
            * sequence_tokens(cfg) / anchor.sequence_tokens * n_steps / anchor.steps)

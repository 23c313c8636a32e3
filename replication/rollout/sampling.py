"""Next-token sampling pieces shared by CPU/GPU engines: truncation and seeded draws.

Which distribution the old log-probs come from (decided here, used by ``hf_engine``):
tokens are DRAWN from the temperature-scaled distribution truncated by top-k / top-p, but their
log-probs are reported under the UNTRUNCATED temperature-scaled softmax, log softmax(z / T).
That is the quantity the PPO loss recomputes (``rl.logprobs``: full softmax at T, like verl's
``old_log_prob`` recomputation), so the ratio π_θ / π_old is exactly 1 before the first update.
With top_p = 1 and top_k = 0 (VIP, DynaMO) drawing and scoring distributions coincide; with
GDRO's top_p 0.8 / top_k 20 the small mismatch is the one verl and TRL also accept.
"""

from __future__ import annotations

import torch


def validate_sampling(temperature: float, top_p: float, top_k: int, max_new_tokens: int) -> None:
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0 (use top_k=1 for greedy), got {temperature}")
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1], got {top_p}")
    if top_k < 0:
        raise ValueError(f"top_k must be >= 0 (0 = off), got {top_k}")
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")


def truncate_logits(scaled: torch.Tensor, top_p: float = 1.0, top_k: int = 0) -> torch.Tensor:
    """Set logits outside the top-k and outside the top-p nucleus to -inf (k first, as HF does).

    ``scaled`` are temperature-scaled float logits [n, V]. At least one token always survives.
    """
    out = scaled
    if 0 < top_k < scaled.shape[-1]:
        kth = torch.topk(out, top_k, dim=-1).values[:, -1:]
        out = out.masked_fill(out < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(out, dim=-1, descending=True)
        probs = torch.softmax(sorted_logits, dim=-1)
        mass_before = probs.cumsum(-1) - probs
        # A token is dropped when the tokens ranked above it already hold >= top_p of the mass;
        # the first token has mass_before = 0 and always stays.
        drop_sorted = mass_before >= top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        out = out.masked_fill(drop, float("-inf"))
    return out


def draw(probs: torch.Tensor, generator: torch.Generator, uniforms: torch.Tensor | None = None) -> torch.Tensor:
    """One token per row from ``probs`` [n, V] by inverse CDF with uniforms from ``generator``
    (or the given [n, 1] float64 ``uniforms``: per-row seeded streams, hf_engine.row_uniforms).

    Uniforms are drawn on the generator's own device and moved, so a CPU generator drives a GPU
    model reproducibly (``torch.multinomial`` needs generator and tensor on the same device).
    ``right=True`` returns the first index whose CDF exceeds u·total: never a zero-mass token.
    """
    if uniforms is None:
        u = torch.rand(probs.shape[0], 1, generator=generator, device=generator.device, dtype=torch.float64)
    else:
        u = uniforms
    cdf = probs.to(torch.float64).cumsum(-1)
    target = u.to(probs.device) * cdf[:, -1:]
    tokens = torch.searchsorted(cdf, target, right=True).squeeze(-1)
    return tokens.clamp_(max=probs.shape[-1] - 1)

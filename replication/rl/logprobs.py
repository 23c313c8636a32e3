"""Per-token log-probs and entropies of a causal LM, aligned with the token they score.

``logp[:, t] = log softmax(z_{t-1} / T)[input_ids[:, t]]`` where z_{t-1} are the logits the
model produces at position t−1, i.e. log π(x_t | x_<t) at temperature T, and
``entropy[:, t]`` is the full-vocabulary entropy of that same temperature-scaled distribution
(what DynaMO's H_t is, dynamo.md B). Column 0 has no context and is always 0.

Matching the sampler exactly (a rollout test checks sampler log-probs against these):
- position ids as transformers' ``generate`` builds them for left-padded prompts:
  ``cumsum(attention_mask) − 1``, pads set to 0; completion tokens continue the count;
- logits upcast to float32 and divided by T (transformers' TemperatureLogitsWarper does
  ``scores / T`` on float32 scores), no top-p / top-k truncation: these are log-probs of the
  untruncated temperature-scaled policy, the quantity verl's ``old_log_prob`` holds too.
  A sampler with top_p < 1 or top_k > 0 (GDRO) samples from a truncated distribution whose
  log-probs differ; the trainer must then use these recomputed values as π_old.
Everything outside the mask is exactly 0 in both outputs.
"""

from __future__ import annotations

import inspect

import torch


def _accepts_logits_to_keep(model: torch.nn.Module) -> bool:
    if isinstance(model, torch.nn.parallel.DistributedDataParallel):
        model = model.module  # DDP's forward(*inputs, **kwargs) passes the keyword through
    try:
        return "logits_to_keep" in inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return False


def token_logprobs_and_entropy(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    temperature: float = 1.0,
    completion_mask: torch.Tensor | None = None,
    chunk: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-prob of each next token and the entropy of its predictive distribution.

    Args:
        model: a causal LM whose forward takes ``input_ids, attention_mask, position_ids`` and
            returns ``.logits`` [n, L, V] (any transformers ``*ForCausalLM``).
        input_ids: [N, L] left-padded prompt + right-padded completion.
        attention_mask: [N, L] 1 for real tokens.
        temperature: T > 0; the same T the sampler used.
        completion_mask: [N, L] positions to score (completion tokens). Default: every real
            token that has a real predecessor, ``attention_mask[:, t] & attention_mask[:, t-1]``.
        chunk: rows per forward pass (bounds the [rows, L, V] logits in memory); None = all.

    Returns:
        (logp, entropy), both [N, L] float32 (the model's float dtype if wider), differentiable
        with respect to the model's parameters unless called under ``torch.no_grad()``.
    """
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if input_ids.shape != attention_mask.shape or input_ids.dim() != 2:
        raise ValueError(
            f"input_ids {tuple(input_ids.shape)} and attention_mask {tuple(attention_mask.shape)} "
            "must be the same [N, L] shape"
        )
    n_rows, length = input_ids.shape
    am = attention_mask.to(torch.bool)
    if completion_mask is None:
        score = torch.zeros_like(am)
        score[:, 1:] = am[:, 1:] & am[:, :-1]
    else:
        if completion_mask.shape != input_ids.shape:
            raise ValueError(f"completion_mask {tuple(completion_mask.shape)} != {tuple(input_ids.shape)}")
        score = completion_mask.to(torch.bool).clone()
        score[:, 0] = False  # nothing predicts the first token
    position_ids = (attention_mask.long().cumsum(-1) - 1).masked_fill(~am, 0)

    # Only the columns from the first scored one on need logits: skip the LM head on prompts.
    cols = torch.nonzero(score.any(0)).flatten()
    start = int(cols[0]) if len(cols) else length
    keep = length - start + 1  # logits at positions start-1 .. L-1
    use_keep = _accepts_logits_to_keep(model)

    step = n_rows if chunk is None else max(1, int(chunk))
    logp_parts, ent_parts = [], []
    for lo in range(0, n_rows if start < length else 0, step):
        hi = min(lo + step, n_rows)
        kwargs = {"logits_to_keep": keep} if use_keep else {}
        out = model(
            input_ids=input_ids[lo:hi],
            attention_mask=attention_mask[lo:hi],
            position_ids=position_ids[lo:hi],
            use_cache=False,
            **kwargs,
        )
        logits = out.logits[:, -keep:, :][:, :-1, :]  # predicts tokens start .. L-1
        wide = torch.promote_types(logits.dtype, torch.float32)
        z = logits.to(wide) / temperature
        lse = torch.logsumexp(z, dim=-1)
        target = input_ids[lo:hi, start:].unsqueeze(-1)
        logp_parts.append(z.gather(-1, target).squeeze(-1) - lse)
        # H = −Σ p log p = logsumexp(z) − Σ p z
        ent_parts.append(lse - (torch.softmax(z, dim=-1) * z).sum(-1))

    if not logp_parts:
        zeros = torch.zeros(n_rows, length, device=input_ids.device)
        return zeros, zeros.clone()
    logp_tail = torch.cat(logp_parts, 0)
    ent_tail = torch.cat(ent_parts, 0)
    pad = logp_tail.new_zeros(n_rows, start)
    logp = torch.cat([pad, logp_tail], 1)
    entropy = torch.cat([pad, ent_tail], 1)
    zero = torch.zeros((), dtype=logp.dtype, device=logp.device)
    return torch.where(score, logp, zero), torch.where(score, entropy, zero)

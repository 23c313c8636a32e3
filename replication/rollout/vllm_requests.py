"""vLLM requests for a step and vLLM's outputs back into an aligned ``RolloutBatch`` (pure:
CPU-testable without vLLM).

Variable n per prompt: ``request_mode="n"`` sends one request per prompt with
``SamplingParams(n=count)`` (vLLM fans it out into child requests and prefix-caches the
prompt); ``"repeat"`` sends ``count`` separate n=1 requests. Seeds: sample j of prompt q gets
seed ``seeds[q] + j`` in both modes (vLLM gives child j of an n>1 request ``seed + j``:
vllm/v1/engine/parallel_sampling.py), so the two modes draw the same samples; ``seeds`` are the
trainer's per-prompt seeds (train/distributed.py::rollout_seeds) or, without them, one draw from
the engine's generator spread as ``base + q * SEED_STRIDE``.

Rows are laid out as ``np.repeat(arange(Q), counts)`` and every per-row field goes through
``RolloutBatch.build``.

Which log-probs vLLM returns is chosen by its ``logprobs_mode``: ``processed_logprobs`` (default
here) = after temperature and truncation, which equals the trainer's log softmax(z / T) when
nothing is truncated; ``raw_logprobs`` = before temperature (equal only at T = 1).
``logprobs_match_trainer(sampling, mode)`` says which case applies.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from replication.rollout.base import RolloutBatch, SamplingConfig, validate_counts


@dataclasses.dataclass(frozen=True)
class Request:
    """One vLLM request: which prompt, how many samples, which seed."""

    prompt_index: int
    prompt_token_ids: list[int]
    n: int
    seed: int


def sampling_kwargs(sampling: SamplingConfig, n: int, seed: int,
                    stop_token_ids: Sequence[int]) -> dict[str, Any]:
    """``vllm.SamplingParams`` keyword arguments for one request. logprobs=0: only the sampled
    token's log-prob; top_k=0: off; detokenize=False: the trainer's tokenizer decodes."""
    return {
        "n": int(n),
        "seed": int(seed),
        "temperature": float(sampling.temperature),
        "top_p": float(sampling.top_p),
        "top_k": int(sampling.top_k) if sampling.top_k > 0 else 0,
        "max_tokens": int(sampling.max_new_tokens),
        "logprobs": 0,
        "stop_token_ids": [int(t) for t in stop_token_ids],
        "detokenize": False,
    }


SEED_STRIDE = 1 << 16
"""Seed distance between consecutive prompts (more than any per-prompt count)."""


def step_seeds(base_seed: int, n_prompts: int) -> np.ndarray:
    """Per-prompt base seeds from one draw: ``base_seed + q * SEED_STRIDE``."""
    return base_seed + SEED_STRIDE * np.arange(n_prompts, dtype=np.int64)


def build_requests(prompt_token_ids: Sequence[Sequence[int]], counts: np.ndarray,
                   seeds: np.ndarray, mode: str = "n") -> list[Request]:
    """Requests for every prompt in order; ``n`` mode: one per prompt, ``repeat``: one per row.
    Sample j of prompt q has seed ``seeds[q] + j`` in both modes. Outputs come back in request
    order, so rows are ``np.repeat(arange(Q), counts)``."""
    counts = validate_counts(counts, len(prompt_token_ids))
    seeds = np.asarray(seeds, dtype=np.int64).reshape(-1)
    if len(seeds) != len(counts):
        raise ValueError(f"{len(seeds)} seeds for {len(counts)} prompts")
    if counts.size and counts.max() >= SEED_STRIDE:
        raise ValueError(f"a count of {counts.max()} exceeds the seed stride {SEED_STRIDE}")
    if mode == "n":
        return [Request(q, list(ids), int(c), int(seeds[q]))
                for q, (ids, c) in enumerate(zip(prompt_token_ids, counts))]
    if mode == "repeat":
        return [Request(q, list(ids), 1, int(seeds[q]) + j)
                for q, (ids, c) in enumerate(zip(prompt_token_ids, counts)) for j in range(int(c))]
    raise ValueError(f"unknown request mode {mode!r}")


def token_logprob(entry: Any, token_id: int) -> float:
    """One position of vLLM's ``logprobs`` / ``prompt_logprobs``: {token_id: Logprob}."""
    if entry is None:
        return float("nan")
    value = entry[token_id] if isinstance(entry, Mapping) else entry
    return float(getattr(value, "logprob", value))


def collect_completions(outputs: Sequence[Any], requests: Sequence[Request]
                        ) -> list[tuple[list[int], list[float]]]:
    """(token ids, sampled log-probs) per row, in row order, from vLLM ``RequestOutput``s."""
    if len(outputs) != len(requests):
        raise RuntimeError(f"vLLM returned {len(outputs)} outputs for {len(requests)} requests")
    rows: list[tuple[list[int], list[float]]] = []
    for out, req in zip(outputs, requests):
        samples = list(out.outputs)
        if len(samples) != req.n:
            raise RuntimeError(f"prompt {req.prompt_index}: vLLM returned {len(samples)} "
                               f"samples for n={req.n}")
        for s in sorted(samples, key=lambda c: getattr(c, "index", 0)):
            tokens = [int(t) for t in s.token_ids]
            lps = s.logprobs
            if lps is None:
                raise RuntimeError("vLLM returned no logprobs (SamplingParams(logprobs=0) needed)")
            rows.append((tokens, [token_logprob(lps[i], t) for i, t in enumerate(tokens)]))
    return rows


def assemble_batch(prompt_ids: Sequence[Hashable], answers: Sequence[str], counts: np.ndarray,
                   prompt_token_ids: Sequence[Sequence[int]],
                   rows: Sequence[tuple[list[int], list[float]]], pad_token_id: int,
                   eos_token_ids: Iterable[int], decode: Callable[[list[int]], str]
                   ) -> RolloutBatch:
    """``RolloutBatch`` from per-row (tokens, log-probs): prompt left-padded, completion
    right-padded; the completion mask covers every returned token (vLLM stops after EOS, so EOS
    is the last one and counts); the decoded text drops EOS tokens."""
    counts = validate_counts(counts, len(prompt_ids))
    row_prompt = np.repeat(np.arange(len(prompt_ids)), counts)
    if len(rows) != len(row_prompt):
        raise RuntimeError(f"{len(rows)} completions for {len(row_prompt)} rows")
    n, p = len(rows), max((len(t) for t in prompt_token_ids), default=0)
    t_width = max(max((len(tok) for tok, _ in rows), default=0), 1)
    input_ids = torch.full((n, p + t_width), int(pad_token_id), dtype=torch.long)
    attention = torch.zeros((n, p + t_width), dtype=torch.long)
    completion = torch.zeros((n, p + t_width), dtype=torch.long)
    old_lp = torch.zeros((n, p + t_width), dtype=torch.float32)
    eos = set(int(e) for e in eos_token_ids)
    texts = []
    for r, (q, (tokens, lps)) in enumerate(zip(row_prompt, rows)):
        prompt = prompt_token_ids[q]
        if len(lps) != len(tokens):
            raise RuntimeError(f"row {r}: {len(tokens)} tokens but {len(lps)} log-probs")
        input_ids[r, p - len(prompt):p] = torch.as_tensor(prompt, dtype=torch.long)
        attention[r, p - len(prompt):p] = 1
        if tokens:
            span = slice(p, p + len(tokens))
            input_ids[r, span] = torch.as_tensor(tokens, dtype=torch.long)
            attention[r, span] = 1
            completion[r, span] = 1
            old_lp[r, span] = torch.as_tensor(lps, dtype=torch.float32)
        texts.append(decode([t for t in tokens if t not in eos]))
    return RolloutBatch.build(prompt_ids, answers, counts, input_ids=input_ids,
                              attention_mask=attention, completion_mask=completion,
                              old_logprobs=old_lp, completions=texts)


def logprobs_match_trainer(sampling: SamplingConfig, logprobs_mode: str) -> bool:
    """Do vLLM's returned log-probs equal the trainer's log softmax(z / T) (up to numerics)?"""
    untruncated = sampling.top_p >= 1.0 and sampling.top_k <= 0
    if logprobs_mode == "processed_logprobs":
        return untruncated
    return untruncated and sampling.temperature == 1.0  # raw: temperature not applied

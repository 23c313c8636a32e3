"""The rollout-engine interface: generate n_q completions for each prompt q.

Every engine (HF generate on CPU/GPU, vLLM on GPU) returns a ``RolloutBatch`` in which every
per-row field is repeated by the SAME counts: row r belongs to prompt ``group_index[r]``.
This is exactly where the official DynaMO code goes wrong (per-row metadata repeated uniformly
while counts vary), so the batch is built in one place (``RolloutBatch.build``) and checked.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Sequence
from typing import Protocol

import numpy as np
import torch


@dataclasses.dataclass(frozen=True)
class SamplingConfig:
    temperature: float = 1.0
    """Sampling temperature (all three papers train at 1.0; GDRO's paper text says 0.6)."""
    top_p: float = 1.0
    """Nucleus sampling mass (GDRO: 0.8)."""
    top_k: int = 0
    """Top-k cut-off, 0 = off (GDRO: 20)."""
    max_new_tokens: int = 16
    """Longest completion in tokens."""


@dataclasses.dataclass
class RolloutBatch:
    """Completions of one step. Rows are grouped by prompt in the order of ``prompt_ids``."""

    prompt_ids: list[Hashable]
    """Per-prompt ids, in plan order (length Q)."""
    counts: np.ndarray
    """Rollouts per prompt (length Q, int64)."""
    group_index: np.ndarray
    """Per-row index into prompt_ids (length N = counts.sum()) — np.repeat(arange(Q), counts)."""
    row_prompt_ids: list[Hashable]
    """Per-row prompt id."""
    row_answers: list[str]
    """Per-row reference answer."""
    input_ids: torch.Tensor
    """[N, P+T] prompt (left-padded) + completion (right-padded) token ids."""
    attention_mask: torch.Tensor
    """[N, P+T] 1 for real tokens (prompt and completion up to and including EOS)."""
    completion_mask: torch.Tensor
    """[N, P+T] 1 for completion tokens that count in the loss (up to and including EOS)."""
    old_logprobs: torch.Tensor
    """[N, P+T] log-prob of each completion token under the sampling distribution (0 elsewhere)."""
    completions: list[str]
    """Per-row decoded completion text (without the EOS token)."""

    @property
    def n_rows(self) -> int:
        return int(self.counts.sum())

    @staticmethod
    def repeat_rows(values: Sequence, counts: np.ndarray) -> list:
        """Repeat per-prompt values by the per-prompt counts (the only way rows are made)."""
        counts = np.asarray(counts, dtype=np.int64)
        if len(values) != len(counts):
            raise ValueError(f"{len(values)} values for {len(counts)} counts")
        return [v for v, c in zip(values, counts) for _ in range(int(c))]

    def check_alignment(self) -> None:
        n = self.n_rows
        expect = np.repeat(np.arange(len(self.prompt_ids)), self.counts)
        if not np.array_equal(self.group_index, expect):
            raise AssertionError("group_index is not np.repeat(arange(Q), counts)")
        if self.row_prompt_ids != [self.prompt_ids[g] for g in self.group_index]:
            raise AssertionError("row_prompt_ids misaligned with group_index")
        for name in ("row_answers", "completions"):
            if len(getattr(self, name)) != n:
                raise AssertionError(f"{name} has {len(getattr(self, name))} rows, expected {n}")
        for name in ("input_ids", "attention_mask", "completion_mask", "old_logprobs"):
            if getattr(self, name).shape[0] != n:
                raise AssertionError(f"{name} has {getattr(self, name).shape[0]} rows, expected {n}")


class RolloutEngine(Protocol):
    """Anything that turns (prompts, counts) into a RolloutBatch."""

    def generate(
        self,
        prompt_ids: Sequence[Hashable],
        prompts: Sequence[str],
        answers: Sequence[str],
        counts: np.ndarray,
        sampling: SamplingConfig,
        generator: torch.Generator | None = None,
    ) -> RolloutBatch: ...

    def sync_weights(self, model: torch.nn.Module) -> None:
        """Make the engine sample from the current policy weights (no-op when it shares them)."""
        ...

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

from replication.config import SamplingConfig  # noqa: F401  (the one sampling dataclass; engines take it)


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

    @classmethod
    def build(
        cls,
        prompt_ids: Sequence[Hashable],
        answers: Sequence[str],
        counts: np.ndarray,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        completion_mask: torch.Tensor,
        old_logprobs: torch.Tensor,
        completions: list[str],
    ) -> "RolloutBatch":
        """The one constructor engines use: every per-row field comes from ``repeat_rows``."""
        counts = validate_counts(counts, len(prompt_ids))
        if len(answers) != len(prompt_ids):
            raise ValueError(f"{len(answers)} answers for {len(prompt_ids)} prompts")
        batch = cls(
            prompt_ids=list(prompt_ids),
            counts=counts,
            group_index=np.repeat(np.arange(len(prompt_ids)), counts),
            row_prompt_ids=cls.repeat_rows(list(prompt_ids), counts),
            row_answers=cls.repeat_rows(list(answers), counts),
            input_ids=input_ids,
            attention_mask=attention_mask,
            completion_mask=completion_mask,
            old_logprobs=old_logprobs,
            completions=completions,
        )
        batch.check_alignment()
        return batch

    def select_groups(self, start: int, stop: int) -> "RolloutBatch":
        """The batch of prompts [start, stop) (whole groups, their rows contiguous), e.g. one
        rank's share of what an engine shared by several ranks generated."""
        if not 0 <= start < stop <= len(self.prompt_ids):
            raise ValueError(f"groups [{start}, {stop}) out of {len(self.prompt_ids)}")
        lo, hi = int(self.counts[:start].sum()), int(self.counts[:stop].sum())
        return RolloutBatch.build(
            self.prompt_ids[start:stop], self._answers_of_groups(start, stop), self.counts[start:stop],
            input_ids=self.input_ids[lo:hi], attention_mask=self.attention_mask[lo:hi],
            completion_mask=self.completion_mask[lo:hi], old_logprobs=self.old_logprobs[lo:hi],
            completions=self.completions[lo:hi])

    def _answers_of_groups(self, start: int, stop: int) -> list[str]:
        """One reference answer per prompt of groups [start, stop): its first row's (its rows
        repeat it; ``group_index`` is sorted, so a search finds that row; a prompt with no rows
        has none to keep)."""
        first = np.searchsorted(self.group_index, np.arange(start, stop))
        return [self.row_answers[int(r)] if self.counts[g] > 0 else ""
                for g, r in zip(range(start, stop), first)]

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


def validate_counts(counts: Sequence[int] | np.ndarray, n_prompts: int) -> np.ndarray:
    """Per-prompt counts as int64, checked: one per prompt, each >= 1.

    A zero count would make an empty group (no advantage baseline, no row to carry the prompt's
    id); allocators guarantee ``lower >= 1``, so a zero here is a bug upstream and raises.
    """
    arr = np.asarray(counts)
    if arr.ndim != 1 or len(arr) != n_prompts:
        raise ValueError(f"counts must be 1-D with one entry per prompt ({n_prompts}), got shape {arr.shape}")
    if arr.size and not np.all(np.equal(np.mod(arr, 1), 0)):
        raise ValueError("counts must be integers")
    arr = arr.astype(np.int64)
    if arr.size and arr.min() < 1:
        raise ValueError(f"every count must be >= 1 (got min {arr.min()}); drop zero-count prompts first")
    return arr


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
        seeds: np.ndarray | None = None,
        logprobs: bool = True,
    ) -> RolloutBatch:
        """``seeds``: optional per-prompt base seeds; sample j of prompt q is drawn with seed
        ``seeds[q] + j``, so a group's samples do not depend on the rest of the call (multi-
        process training splits a step's groups across ranks: train/distributed.py).
        ``logprobs=False``: completions only (evaluation) — the engine may skip any pass it runs
        only for ``old_logprobs``, which then are not the PPO ratio's π_old and must not be
        trained on."""
        ...

    def sync_weights(self, model: torch.nn.Module) -> None:
        """Make the engine sample from the current policy weights (no-op when it shares them)."""
        ...

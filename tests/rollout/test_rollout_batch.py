"""``RolloutBatch``: one rank's share of a batch keeps each group's rows and reference answer."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from replication.rollout.base import RolloutBatch


def _batch(counts: list[int]) -> RolloutBatch:
    q, n = len(counts), int(sum(counts))
    rows = torch.arange(n)[:, None].repeat(1, 3)
    return RolloutBatch.build([f"p{i}" for i in range(q)], [f"ans{i}" for i in range(q)],
                              np.array(counts), input_ids=rows, attention_mask=torch.ones_like(rows),
                              completion_mask=torch.ones_like(rows),
                              old_logprobs=-rows.float(), completions=[f"c{r}" for r in range(n)])


@pytest.mark.parametrize("start, stop", [(0, 1), (1, 3), (2, 5), (0, 5), (4, 5)])
def test_select_groups_keeps_rows_and_answers_of_each_group(start, stop):
    counts = [3, 1, 4, 2, 5]
    whole = _batch(counts)
    part = whole.select_groups(start, stop)
    part.check_alignment()
    lo, hi = sum(counts[:start]), sum(counts[:stop])
    assert part.prompt_ids == [f"p{i}" for i in range(start, stop)]
    assert part.row_answers == [f"ans{i}" for i in range(start, stop) for _ in range(counts[i])]
    assert part.completions == [f"c{r}" for r in range(lo, hi)]
    assert torch.equal(part.input_ids, whole.input_ids[lo:hi])


def test_answers_of_groups_reads_group_index():
    """The first row of each group comes from ``group_index`` (not recomputed from counts): a
    batch whose group_index were inconsistent with counts could not pass check_alignment, so
    the two agree and the answer is the group's own."""
    whole = _batch([2, 1, 3])
    assert whole._answers_of_groups(0, 3) == ["ans0", "ans1", "ans2"]
    assert whole._answers_of_groups(1, 2) == ["ans1"]

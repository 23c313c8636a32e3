"""train/row_dispatch.py: a mini-batch's trainable rows dealt out evenly over ranks.

The deal (balanced, deterministic, every row once, one rank unchanged); the column trim of
gathered rows leaves every log-prob as computed on the rank's own batch; and, on 2 real gloo
ranks of unequal batch shapes, the gather aligns every rank's rows at the prompt/completion
boundary and ``own_rows`` returns each row's value to the rank that holds it. That a 2-rank
update equals the 1-process one is tests/train/test_distributed.py's end-to-end check.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dist_helpers import run_two_ranks
from replication.rl import token_logprobs_and_entropy
from replication.train.row_dispatch import StepRows, deal


def test_one_rank_trains_every_row_in_order():
    rows = np.array([7, 2, 9, 4])
    (mine,) = deal(rows, np.array([1.0, 50.0, 3.0, 2.0]), 1)
    assert mine.tolist() == [7, 2, 9, 4]


def test_deal_balances_tokens_and_gives_every_row_once():
    rows = np.arange(10, 16)
    cost = np.array([10.0, 9.0, 8.0, 1.0, 1.0, 1.0])
    a, b = deal(rows, cost, 2)
    assert sorted([*a, *b]) == rows.tolist()  # every row exactly once
    assert a.tolist() == sorted(a.tolist()) and b.tolist() == sorted(b.tolist())
    # largest first, each to the lighter rank: 10 | 9, 8 | then the 1s to the first rank
    assert a.tolist() == [10, 13, 14, 15] and b.tolist() == [11, 12]
    # the measured smollm2 case: all 12 trainable rows generated on rank 0, 4 on rank 1
    parts = deal(np.arange(16), np.full(16, 50.0), 2)
    assert [len(p) for p in parts] == [8, 8]


def test_deal_is_the_same_on_every_rank_and_handles_few_rows():
    rows, cost = np.array([3, 1, 2]), np.array([5.0, 5.0, 5.0])
    assert [p.tolist() for p in deal(rows, cost, 2)] == [p.tolist() for p in deal(rows.copy(), cost.copy(), 2)]
    assert [p.tolist() for p in deal(rows, cost, 2)] == [[1, 3], [2]]  # ties: lower row first, lower rank
    parts = deal(np.array([4]), np.array([3.0]), 3)
    assert [p.tolist() for p in parts] == [[4], [], []]  # ranks without a row run a zero pass
    assert [len(p) for p in deal(np.array([], dtype=np.int64), np.array([]), 2)] == [0, 0]


def test_one_process_rows_are_the_batch_untrimmed():
    ids = torch.ones(2, 5, dtype=torch.long)
    r = StepRows(ids, ids, ids, ids.float(), torch.zeros(2), None)
    assert r.columns(torch.tensor([0])) == slice(None)


def test_trimmed_gathered_rows_give_the_rank_s_log_probs():
    """A row re-padded as the gather pads it (more prompt padding on the left, more completion
    padding on the right), then trimmed to its real columns, scores every completion token as
    on the rank's own batch."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=37, hidden_size=16, intermediate_size=32,
                                         num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                                         max_position_embeddings=64, pad_token_id=0)).eval()
    # the rank's batch: prompt width 3, completion width 3
    ids = torch.tensor([[0, 5, 6, 14, 15, 0], [9, 10, 11, 17, 18, 19]])
    attn = (ids != 0).long()
    comp = torch.zeros_like(ids)
    comp[:, 3:] = attn[:, 3:]
    # gathered beside a rank with prompt width 5 and completion width 4: 2 columns left, 1 right
    big = lambda t: torch.nn.functional.pad(t, (2, 1))  # noqa: E731
    rows = StepRows(big(ids), big(attn), big(comp), big(comp).float(), torch.zeros(2), None, gathered=True)
    with torch.no_grad():
        ref, _ = token_logprobs_and_entropy(model, ids, attn, 1.0, completion_mask=comp.float())
        for keep in (torch.tensor([0]), torch.tensor([1]), torch.tensor([0, 1])):
            cols = rows.columns(keep)
            got, _ = token_logprobs_and_entropy(model, rows.input_ids[keep, cols], rows.attention_mask[keep, cols],
                                                1.0, completion_mask=rows.completion_mask[keep, cols].float())
            want = ref[keep][comp[keep].bool()]
            assert torch.allclose(got[rows.completion_mask[keep, cols].bool()], want, atol=1e-6)
            assert cols.stop - cols.start <= 8  # padding common to the kept rows is cut


RANKS = r"""
import json, sys
import numpy as np
import torch
from replication.rollout.base import RolloutBatch
from replication.train.distributed import RowShard, World
from replication.train.row_dispatch import gather_rows, own_rows

world = World.from_env()
r = world.rank
# rank 0: 2 rows, prompt width 2, completion width 3; rank 1: 3 rows, prompt width 4, completion width 1
P, T, n = (2, 3, 2) if r == 0 else (4, 1, 3)
ids = torch.arange(1, n * (P + T) + 1).reshape(n, P + T) + 100 * r
attn = torch.ones_like(ids)
attn[0, 0] = 0  # left padding of the first prompt
ids[0, 0] = 0
comp = torch.zeros_like(ids)
comp[:, P:] = 1
comp[-1, -1] = 0 if T > 1 else 1
attn[-1, -1] = comp[-1, -1] if T > 1 else 1
old = -(ids.float() / 1000) * comp
batch = RolloutBatch(prompt_ids=list(range(n)), counts=np.ones(n, dtype=np.int64), group_index=np.arange(n),
                     row_prompt_ids=list(range(n)), row_answers=[""] * n, input_ids=ids, attention_mask=attn,
                     completion_mask=comp, old_logprobs=old, completions=[""] * n)
start = 0 if r == 0 else 2
shard = RowShard(world, 5, start, start + n)
adv = torch.tensor([0.5 * (r + 1) + i for i in range(n)], dtype=torch.float32)
w = np.full(n, 1.0 + r)
rows = gather_rows(batch, adv, w, shard)
out = {"ids": rows.input_ids.tolist(), "attn": rows.attention_mask.tolist(), "comp": rows.completion_mask.tolist(),
       "old": rows.old_logprobs.tolist(), "adv": rows.advantages.tolist(), "w": rows.weights.tolist(),
       "dtypes": [str(t.dtype) for t in (rows.input_ids, rows.attention_mask, rows.old_logprobs)],
       "local": {"ids": ids.tolist(), "attn": attn.tolist(), "comp": comp.tolist(), "old": old.tolist()}}
# rows 0 and 3 trained on rank 0, the others on rank 1
loss = np.zeros(5)
for g in ([0, 3] if r == 0 else [1, 2, 4]):
    loss[g] = 10.0 + g
(back,) = own_rows(shard, loss)
out["back"] = back.tolist()
json.dump(out, open(sys.argv[1] + f"/rank{r}.json", "w"))
world.close()
"""


def test_two_ranks_gather_aligned_rows_and_get_their_losses_back(tmp_path):
    res = run_two_ranks(RANKS, tmp_path)
    a, b = res
    for k in ("ids", "attn", "comp", "old", "adv", "w"):
        assert a[k] == b[k], k  # every rank holds the same global rows
    assert a["dtypes"] == ["torch.int64", "torch.int64", "torch.float32"]
    assert np.array(a["ids"]).shape == (5, 4 + 3)  # widest prompt (4) + widest completion (3)
    comp = np.array(a["comp"])
    assert (comp[:, :4] == 0).all() and (comp[:, 4] == 1).all()  # every completion starts at column 4
    for rank, (lo, hi) in enumerate(((0, 2), (2, 5))):  # each rank's rows, re-padded, are its own rows
        local = res[rank]["local"]
        for k in ("ids", "attn", "comp", "old"):
            mine = np.array(a[k])[lo:hi]
            width = np.array(local[k]).shape[1]
            shift = 4 - (2 if rank == 0 else 4)
            assert np.array_equal(mine[:, shift: shift + width], np.array(local[k])), (rank, k)
            assert not np.any(np.delete(mine, np.s_[shift: shift + width], axis=1)), (rank, k)  # padding only
    assert a["adv"] == [0.5, 1.5, 1.0, 2.0, 3.0] and a["w"] == [1.0, 1.0, 2.0, 2.0, 2.0]
    assert a["back"] == [10.0, 11.0] and b["back"] == [12.0, 13.0, 14.0]  # every row's loss to its rank


@pytest.mark.parametrize("ranks", [2, 3, 8])
def test_deal_loads_differ_by_at_most_one_row(ranks):
    rng = np.random.default_rng(ranks)
    cost = rng.integers(20, 60, size=40).astype(float)
    parts = deal(np.arange(40), cost, ranks)
    loads = [cost[p].sum() for p in parts]
    assert max(loads) - min(loads) <= cost.max()  # greedy largest-first: within one row's cost

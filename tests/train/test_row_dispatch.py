"""train/row_dispatch.py: a mini-batch's trainable rows dealt out evenly over ranks, moving
only the rows the balance needs.

The deal (balanced, deterministic, every row once, one rank unchanged; with owners, rows stay
home unless a move narrows the gap); the column trim of re-padded rows leaves every log-prob as
computed on the rank's own batch; and, on 2 real gloo ranks of unequal batch shapes, every rank
learns every row's numbers, the moved rows arrive aligned at the prompt/completion boundary in
one all-to-all (none when nothing moves), and ``own_rows`` returns each row's value to the rank
that holds it. That a 2-rank update equals the 1-process one is tests/train/test_distributed.py's
end-to-end check.
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
    ids = torch.arange(10).reshape(2, 5)
    r = StepRows(np.arange(2), ids, ids, ids, ids.float())
    assert r.columns(torch.tensor([0])) == slice(None)
    got = r.take(torch.tensor([1]))
    assert all(torch.equal(t, want) for t, want in zip(got, (ids[[1]], ids[[1]], ids[[1]], ids[[1]].float())))


def test_rows_not_held_are_refused():
    ids = torch.ones(1, 3, dtype=torch.long)
    r = StepRows(np.array([-1, 0, -1]), ids, ids, ids, ids.float(), gathered=True)
    with pytest.raises(RuntimeError, match=r"\[2\]"):
        r.take(torch.tensor([1, 2]))


def test_owned_rows_stay_home_when_the_shares_are_within_one_row():
    rows = np.arange(6)
    cost = np.array([10.0, 12.0, 11.0, 9.0, 13.0, 10.0])
    owner = np.array([0, 0, 0, 1, 1, 1])  # loads 33 | 32: no row is smaller than the gap
    a, b = deal(rows, cost, 2, owner=owner)
    assert a.tolist() == [0, 1, 2] and b.tolist() == [3, 4, 5]
    assert [p.tolist() for p in deal(rows, cost, 1, owner=owner)] == [rows.tolist()]


def test_only_the_rows_the_balance_needs_move():
    # the measured smollm2 case: 12 trainable rows generated on rank 0, 4 on rank 1
    owner = np.array([0] * 12 + [1] * 4)
    a, b = deal(np.arange(16), np.full(16, 50.0), 2, owner=owner)
    assert len(a) == len(b) == 8
    assert set(b) >= {12, 13, 14, 15}  # rank 1 keeps its own
    moved = [r for r in b if owner[r] == 0]
    assert len(moved) == 4 and moved == sorted(moved)[:4]  # exactly four move (ties: lower rows)
    assert moved == [0, 1, 2, 3]
    # the row that best closes the gap moves: gap 40, rows 30 and 19 -> moving 19 leaves |40-38| = 2
    a, b = deal(np.array([5, 6, 7]), np.array([30.0, 19.0, 10.0]), 2, owner=np.array([0, 0, 1]))
    assert a.tolist() == [5] and b.tolist() == [6, 7]


def test_owner_must_name_a_rank_for_every_row():
    with pytest.raises(ValueError, match="owner"):
        deal(np.arange(3), np.ones(3), 2, owner=np.array([0, 1]))
    with pytest.raises(ValueError, match="owner"):
        deal(np.arange(2), np.ones(2), 2, owner=np.array([0, 2]))


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
    rows = StepRows(np.array([1, 0]), big(ids)[[1, 0]], big(attn)[[1, 0]], big(comp)[[1, 0]],
                    big(comp)[[1, 0]].float(), gathered=True)  # held in another order than the rows
    with torch.no_grad():
        ref, _ = token_logprobs_and_entropy(model, ids, attn, 1.0, completion_mask=comp.float())
        for keep in (torch.tensor([0]), torch.tensor([1]), torch.tensor([0, 1])):
            k_ids, k_attn, k_comp, _ = rows.take(keep)
            got, _ = token_logprobs_and_entropy(model, k_ids, k_attn, 1.0, completion_mask=k_comp.float())
            want = ref[keep][comp[keep].bool()]
            assert torch.allclose(got[k_comp.bool()], want, atol=1e-6)
            assert k_ids.shape[1] <= 8 and k_ids.shape[1] < big(ids).shape[1]  # common padding is cut


RANKS = r"""
import json, sys
import numpy as np
import torch
from replication.rollout.base import RolloutBatch
from replication.train.distributed import RowShard, World
from replication.train.row_dispatch import fetch_rows, own_rows, step_meta

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
meta = step_meta(batch, adv, w, shard)
calls = []
exchange = world.exchange
world.__dict__["exchange"] = lambda *a: calls.append(1) or exchange(*a)  # counts the all-to-alls
# rows 0 and 3 trained on rank 0 (3 moves from rank 1), rows 1, 2 and 4 on rank 1 (1 moves from rank 0)
shares = [np.array([0, 3]), np.array([1, 2, 4])]
rows = fetch_rows(batch, meta, shard, shares)
held = {g: [t.tolist() for t in rows.take(torch.tensor([g]))] for g in shares[r].tolist()}
stay = fetch_rows(batch, meta, shard, [np.array([0, 1]), np.array([2, 3, 4])])  # nothing moves
out = {"offsets": meta.offsets.tolist(), "adv": meta.advantages.tolist(), "w": meta.weights.tolist(),
       "real": meta.real_tokens.tolist(), "comp_tokens": meta.completion_tokens.tolist(),
       "widths": [meta.prompt_width, meta.completion_width], "held": held, "calls": len(calls),
       "index": rows.index.tolist(), "stay_index": stay.index.tolist(),
       "dtypes": [str(t.dtype) for t in (rows.input_ids, rows.attention_mask, rows.old_logprobs)],
       "local": {"ids": ids.tolist(), "attn": attn.tolist(), "comp": comp.tolist(), "old": old.tolist()}}
loss = np.zeros(5)
for g in shares[r]:
    loss[g] = 10.0 + g
(back,) = own_rows(shard, loss)
out["back"] = back.tolist()
json.dump(out, open(sys.argv[1] + f"/rank{r}.json", "w"))
world.close()
"""


def test_two_ranks_move_only_the_dealt_rows_and_get_their_losses_back(tmp_path):
    res = run_two_ranks(RANKS, tmp_path)
    a, b = res
    for k in ("offsets", "adv", "w", "real", "comp_tokens", "widths"):
        assert a[k] == b[k], k  # every rank knows every row's numbers
    assert a["offsets"] == [0, 2, 5]
    assert a["adv"] == [0.5, 1.5, 1.0, 2.0, 3.0] and a["w"] == [1.0, 1.0, 2.0, 2.0, 2.0]
    assert a["widths"] == [4, 3]  # widest prompt (4), widest completion (3)
    for rank, lo in ((0, 0), (1, 2)):  # token counts of each rank's own rows
        local = res[rank]["local"]
        n = len(local["ids"])
        assert a["real"][lo: lo + n] == np.array(local["attn"]).sum(1).tolist()
        assert a["comp_tokens"][lo: lo + n] == np.array(local["comp"]).sum(1).tolist()
    assert a["dtypes"] == ["torch.int64", "torch.int64", "torch.float32"]
    # each rank holds only the rows it trains, one all-to-all brought the moved ones
    assert [i >= 0 for i in a["index"]] == [True, False, False, True, False]
    assert [i >= 0 for i in b["index"]] == [False, True, True, False, True]
    assert a["calls"] == b["calls"] == 1  # the second fetch (nothing moves) sent nothing
    assert [i >= 0 for i in a["stay_index"]] == [True, True, False, False, False]
    # every held row, trimmed to its real columns, is the generating rank's row
    for rank, held in ((0, a["held"]), (1, b["held"])):
        for g, (ids, attn, comp, old) in held.items():
            g = int(g)
            src, i = (0, g) if g < 2 else (1, g - 2)
            local = res[src]["local"]
            want_attn = np.array(local["attn"][i])
            real = np.flatnonzero(want_attn)
            cut = slice(real[0], real[-1] + 1)
            for got, key in ((ids, "ids"), (attn, "attn"), (comp, "comp"), (old, "old")):
                assert np.array_equal(np.array(got[0]), np.array(local[key][i])[cut]), (rank, g, key)
    assert a["back"] == [10.0, 11.0] and b["back"] == [12.0, 13.0, 14.0]  # every row's loss to its rank


@pytest.mark.parametrize("ranks", [2, 3, 8])
@pytest.mark.parametrize("owned", [False, True])
def test_deal_loads_differ_by_at_most_one_row(ranks, owned):
    rng = np.random.default_rng(ranks)
    cost = rng.integers(20, 60, size=40).astype(float)
    # owned: the rows as the rewards leave them, most of them on the first rank
    owner = np.minimum(rng.geometric(0.6, size=40) - 1, ranks - 1) if owned else None
    parts = deal(np.arange(40), cost, ranks, owner=owner)
    assert sorted(np.concatenate(parts).tolist()) == list(range(40))  # every row exactly once
    loads = [cost[p].sum() for p in parts]
    assert max(loads) - min(loads) <= cost.max()  # within one row's cost
    if owned:  # a rank that only received rows kept no room for its own: nothing moved needlessly
        again = deal(np.arange(40), cost, ranks, owner=np.concatenate([[r] * len(p) for r, p in enumerate(parts)])
                     [np.argsort(np.concatenate(parts))])
        assert [p.tolist() for p in again] == [p.tolist() for p in parts]  # a balanced deal stays put

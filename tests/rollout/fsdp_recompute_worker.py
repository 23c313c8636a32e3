"""One rank of tests/rollout/test_vllm_recompute_fsdp.py (run by torchrun, 2 ranks, gloo): the
vLLM engine's old-log-prob recompute over an FSDP-sharded policy, with a different number of rows
on each rank, against the same policy unsharded. Writes ``<out>/rank<r>.json``."""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import torch


def main(out: Path, rows_by_rank: list[int]) -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    from replication.config import VLLMSection
    from replication.rl import token_logprobs_and_entropy
    from replication.rollout.vllm_engine import VLLMRolloutEngine
    from replication.train.distributed import World
    from replication.train.fsdp import is_sharded, shard_policy

    world = World.from_env(sharding="fsdp")
    torch.manual_seed(0)  # the same policy on every rank
    model = LlamaForCausalLM(LlamaConfig(vocab_size=40, hidden_size=16, intermediate_size=32,
                                         num_hidden_layers=2, num_attention_heads=2,
                                         num_key_value_heads=2, max_position_embeddings=64))
    reference = copy.deepcopy(model)
    shard_policy(model, world)
    assert is_sharded(model)

    g = torch.Generator().manual_seed(100 + world.rank)  # each rank its own rows
    n, prompt, completion = rows_by_rank[world.rank], 5, 4
    ids = torch.randint(2, 40, (n, prompt + completion), generator=g)
    mask = torch.ones_like(ids)
    comp = torch.zeros_like(ids)
    comp[:, prompt:] = 1
    batch = SimpleNamespace(input_ids=ids, attention_mask=mask, completion_mask=comp, n_rows=n)

    passes = []
    engine = VLLMRolloutEngine(None, None, VLLMSection(), policy=model, eos_token_ids=[1],
                               pass_sync=lambda k: passes.append(k) or int(world.max(k)),
                               recompute_rows=1)
    got = engine.recompute_old_logprobs(batch, 1.0)
    with torch.no_grad():
        want, _ = token_logprobs_and_entropy(reference, ids, mask, 1.0, completion_mask=comp)
    world.barrier()
    (out / f"rank{world.rank}.json").write_text(json.dumps({
        "rows": n, "own_passes": passes, "max_abs_diff": float((got - want.float()).abs().max()),
    }))
    world.close()


if __name__ == "__main__":
    main(Path(sys.argv[1]), [int(x) for x in sys.argv[2].split(",")])

"""The vLLM engine's old-log-prob recompute over an FSDP-sharded policy on 2 real processes
(torchrun, gloo), the ranks holding different numbers of rows: every rank must run as many forward
passes as the rank with the most, and agree on that number before its first pass. The rehearsal
run through vLLM with paper-gdro's FSDP sharding hung there (2026-12-07): the ranks asked for the
largest count after their own passes, so the rank with fewer rows waited in that all-reduce while
the other waited in a pass's all-gather. With a 60-s collective timeout a regression fails here
instead of hanging."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).with_name("fsdp_recompute_worker.py")


@pytest.mark.parametrize("rows", [(5, 2), (1, 3)], ids=["rank0-more", "rank1-more"])
def test_recompute_passes_match_across_fsdp_ranks(tmp_path, rows):
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    env.update(PYTHONPATH=os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
               OMP_NUM_THREADS="1", REPLICATION_COLLECTIVE_TIMEOUT_S="60")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           str(WORKER), str(tmp_path), ",".join(map(str, rows))]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    got = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    for r, g in enumerate(got):
        assert g["rows"] == rows[r] and g["own_passes"] == [rows[r]], g  # one pass a row, asked once
        assert g["max_abs_diff"] < 1e-5, g  # the sharded policy's log-probs are the unsharded one's
